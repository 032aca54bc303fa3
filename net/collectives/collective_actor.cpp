#include "net/collectives/collective_actor.h"

#include <condition_variable>
#include <deque>
#include <mutex>

namespace troupe::net::collectives {

struct CollectiveActor::Mailbox {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;

  void run() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stopping || !jobs.empty(); });
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();  // jobs report their own errors (through their Work)
    }
  }
};

CollectiveActor::CollectiveActor() : mailbox_(std::make_shared<Mailbox>()) {}

CollectiveActor::~CollectiveActor() {
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->stopping = true;
  }
  mailbox_->cv.notify_all();
  if (!thread_.joinable()) return;
  // A job's last reference to the group can die on the actor's thread, destroying this object
  // there: that thread cannot join itself, and it holds the mailbox, so it just returns.
  if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
  else thread_.join();
}

void CollectiveActor::post(std::function<void()> job) {
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->jobs.push_back(std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([mailbox = mailbox_] { mailbox->run(); });
  }
  mailbox_->cv.notify_one();
}

}  // namespace troupe::net::collectives
