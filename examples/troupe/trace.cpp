// `troupe trace merge DIR -o job.json`: the ranks' traces of one job (TROUPE_TRACE=DIR or `troupe
// launch --trace DIR` wrote DIR/rank-N.json) as one Chrome/Perfetto trace: a process per rank,
// each rank's thread lanes as they were and its device lanes (a GPU stream, a host lane) as
// tracks of the same process, timestamps moved onto one clock by the offsets each rank measured
// at connect (actors/observe/profiler.h), remote calls as arrows from the caller's span to the callee's,
// collectives as spans with their bytes and algorithm on every rank. It prints the bound on the
// clock error: the largest of the ranks' (half their best ping-pong round trip).
//
//   TROUPE_TRACE=/tmp/t build/bin/troupe launch --nproc 2 -- build/bin/remote_bench
//   build/bin/troupe trace merge /tmp/t -o job.json   # open in https://ui.perfetto.dev
//
// The ranks' files are read in place (mapped) and their events copied through with pid, ts and
// fork ids rewritten (json_scan.h), one pass per file, a thread per core: a 4-rank, 60 s job's
// 650 MB of events took 3.8 s of CPU on the 2-core test machine (nlohmann::json took 5 s for 3 s
// of 2 ranks).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "devices/error.h"
#include "examples/troupe/commands.h"
#include "examples/troupe/json_scan.h"

namespace troupe::cli {

namespace {

// A rank's device lanes (its process 2) become threads of its process from this tid on.
constexpr int64_t kDeviceTid = 1 << 20;

// A file mapped read-only, for the scanner to walk in place.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw IOError("merge: cannot open " + path);
    struct stat st {};
    if (::fstat(fd, &st) == 0) size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data_ == MAP_FAILED) data_ = nullptr;
      else ::madvise(data_, size_, MADV_SEQUENTIAL);
    }
    ::close(fd);
    if (size_ > 0 && !data_) throw IOError("merge: cannot map " + path);
  }
  ~MappedFile() {
    if (data_) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view text() const { return {static_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// What a rank wrote about its clock (the "troupe" member of its trace).
struct RankClock {
  int64_t origin_ns = 0, offset_ns = 0, error_ns = -1;
  bool found = false;
};

struct RankFile {
  int rank = 0;
  std::unique_ptr<MappedFile> file;
  RankClock clock;
  const char* events = nullptr;  // the traceEvents array
};

template <class T>
T parse_number(std::string_view text, const std::string& what) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw IOError("merge: " + what + " is not a number: " + std::string(text.substr(0, 40)));
  return value;
}

// Finds a rank's clock and its events. The profiler writes the clock first: then the events are
// not read twice (an older trace with the clock after them is read through).
void scan_rank(RankFile& r) {
  const std::string_view text = r.file->text();
  const JsonScan scan(text);
  scan.members(scan.skip_space(text.data()), [&](std::string_view key, const char* value) -> const char* {
    if (key == "traceEvents") {
      r.events = value;
      if (r.clock.found) return nullptr;
    }
    if (key != "troupe") return scan.skip_value(value);
    r.clock.found = true;
    return scan.members(value, [&](std::string_view k, const char* v) {
      const char* end = scan.skip_value(v);
      const std::string_view number(v, static_cast<size_t>(end - v));
      if (k == "origin_ns") r.clock.origin_ns = parse_number<int64_t>(number, "origin_ns");
      if (k == "clock_offset_ns") r.clock.offset_ns = parse_number<int64_t>(number, "clock_offset_ns");
      if (k == "clock_error_ns") r.clock.error_ns = parse_number<int64_t>(number, "clock_error_ns");
      return end;
    });
  });
  if (!r.events) throw IOError("merge: " + r.file->path() + " has no traceEvents");
}

std::vector<RankFile> open_ranks(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw UsageError("merge: " + dir + " is not a directory");
  std::vector<RankFile> ranks;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
    RankFile r;
    r.rank = std::stoi(name.substr(5));
    r.file = std::make_unique<MappedFile>(entry.path().string());
    try {
      scan_rank(r);
    } catch (const IOError& e) {
      throw IOError("merge: " + entry.path().string() + " is not a trace: " + e.what());
    }
    ranks.push_back(std::move(r));
  }
  if (ranks.empty()) throw UsageError("merge: no rank-N.json in " + dir + " (was TROUPE_TRACE set?)");
  std::sort(ranks.begin(), ranks.end(), [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  return ranks;
}

// A part of the merged trace, written through a large buffer.
class Output {
 public:
  explicit Output(std::string path)
      : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)), buf_(new char[kSize]) {
    if (fd_ < 0) throw IOError("merge: cannot write " + path_);
  }
  ~Output() {
    if (fd_ >= 0) ::close(fd_);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  Output& operator<<(std::string_view text) {
    if (used_ + text.size() > kSize) flush();
    if (text.size() > kSize) return write(text.data(), text.size()), *this;
    std::memcpy(buf_.get() + used_, text.data(), text.size());
    used_ += text.size();
    return *this;
  }
  Output& operator<<(int64_t n) {
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
    return *this << std::string_view(digits, static_cast<size_t>(end - digits));
  }
  // Microseconds from nanoseconds: 12.345
  void micros(int64_t ns) {
    if (ns < 0) *this << "-";
    const uint64_t abs = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
    char digits[32];
    auto [end, ec] = std::to_chars(digits, digits + sizeof digits, abs / 1000);
    *end++ = '.';
    const uint64_t frac = abs % 1000;
    *end++ = static_cast<char>('0' + frac / 100);
    *end++ = static_cast<char>('0' + frac / 10 % 10);
    *end++ = static_cast<char>('0' + frac % 10);
    *this << std::string_view(digits, static_cast<size_t>(end - digits));
  }
  // Appends what another Output wrote (closed), copied by the kernel, and removes its file.
  void append(const std::string& part_path) {
    flush();
    const int in = ::open(part_path.c_str(), O_RDONLY);
    if (in < 0) throw IOError("merge: cannot read " + part_path);
    for (;;) {
      const ssize_t n = ::copy_file_range(in, nullptr, fd_, nullptr, size_t{1} << 30, 0);
      if (n == 0) break;
      if (n < 0) {  // a file system without it: read and write
        for (ssize_t got; (got = ::read(in, buf_.get(), kSize)) > 0;) write(buf_.get(), static_cast<size_t>(got));
        break;
      }
    }
    ::close(in);
    std::filesystem::remove(part_path);
  }
  void close() {
    flush();
    const bool failed = ::close(fd_) != 0;
    fd_ = -1;
    if (failed) throw IOError("merge: writing " + path_ + " failed");
  }

 private:
  static constexpr size_t kSize = 8 << 20;
  void write(const char* data, size_t n) {
    while (n > 0) {
      const ssize_t done = ::write(fd_, data, n);
      if (done <= 0) throw IOError("merge: writing " + path_ + " failed");
      data += done;
      n -= static_cast<size_t>(done);
    }
  }
  void flush() {
    write(buf_.get(), used_);
    used_ = 0;
  }

  std::string path_;
  int fd_;
  std::unique_ptr<char[]> buf_;
  size_t used_ = 0;
};

struct Tally {
  size_t events = 0;
  std::vector<uint64_t> calls, served;  // remote flow ids sent and received
};

// A timestamp in microseconds as nanoseconds: the profiler writes three decimals, exactly; other
// writers' longer fractions are rounded.
int64_t parse_ts_ns(std::string_view text) {
  const char* p = text.data();
  const char* end = p + text.size();
  const bool negative = p < end && *p == '-';
  int64_t whole = 0;
  const auto [dot, ec] = std::from_chars(p + negative, end, whole);
  if (ec == std::errc() && (dot == end || (*dot == '.' && end - dot <= 4 && end - dot >= 2))) {
    int64_t frac = 0;
    int digits = 0;
    for (const char* q = dot + (dot < end); q < end; ++q, ++digits) {
      if (*q < '0' || *q > '9') return static_cast<int64_t>(parse_number<double>(text, "ts") * 1000.0);
      frac = frac * 10 + (*q - '0');
    }
    for (; digits < 3; ++digits) frac *= 10;
    const int64_t ns = whole * 1000 + frac;
    return negative ? -ns : ns;
  }
  const double us = parse_number<double>(text, "ts");
  return static_cast<int64_t>(us * 1000.0 + (us < 0 ? -0.5 : 0.5));
}

// The members of an event the merge reads or rewrites, as written (empty: absent).
struct EventFields {
  std::string_view ph, cat, name, pid, tid, ts, id;

  std::string_view* slot(std::string_view key) {
    switch (key.size()) {
      case 2:
        if (key[0] == 'p' && key[1] == 'h') return &ph;
        if (key[0] == 't' && key[1] == 's') return &ts;
        if (key[0] == 'i' && key[1] == 'd') return &id;
        return nullptr;
      case 3:
        if (std::memcmp(key.data(), "pid", 3) == 0) return &pid;
        if (std::memcmp(key.data(), "tid", 3) == 0) return &tid;
        if (std::memcmp(key.data(), "cat", 3) == 0) return &cat;
        return nullptr;
      case 4:
        return std::memcmp(key.data(), "name", 4) == 0 ? &name : nullptr;
      default:
        return nullptr;
    }
  }
};

// Copies one rank's events into the merged trace as they were written, with pid = rank, ts on
// the common clock, fork ids apart from other ranks' (rank * 2^32 + id; remote ids are unique in
// the job already), device lanes as threads of the rank from kDeviceTid on. The rank's own process
// names are replaced by the merge's.
void copy_events(const RankFile& r, int64_t shift_ns, Output& out, Tally& tally) {
  const JsonScan scan(r.file->text());
  const std::string rank = std::to_string(r.rank);
  scan.elements(r.events, [&](const char* event) {
    EventFields f;
    const char* end = scan.members(event, [&](std::string_view key, const char* value) {
      const char* value_end = scan.skip_value(value);
      if (std::string_view* slot = f.slot(key)) *slot = {value, static_cast<size_t>(value_end - value)};
      return value_end;
    });
    if (f.ph == "\"M\"" && (f.name == "\"process_name\"" || f.name == "\"process_sort_index\"")) return end;
    const bool device = f.pid == "2", fork = f.cat == "\"fork\"", remote = f.cat == "\"remote\"";
    uint64_t id = 0;
    if ((fork || remote) && !f.id.empty()) {
      id = parse_number<uint64_t>(f.id, "id");
      if (remote && f.ph == "\"s\"") tally.calls.push_back(id);
      if (remote && f.ph == "\"f\"") tally.served.push_back(id);
    }
    // The members to rewrite, in the order they were written; the text between them is copied.
    std::string_view* patches[4];
    int n = 0;
    for (std::string_view* m : {&f.pid, &f.ts, &f.tid, &f.id})
      if (!m->empty() && (m != &f.tid || device) && (m != &f.id || fork)) patches[n++] = m;
    std::sort(patches, patches + n, [](const std::string_view* a, const std::string_view* b) { return a->data() < b->data(); });
    out << ",\n";
    ++tally.events;
    const char* copied = event;
    for (int i = 0; i < n; ++i) {
      std::string_view* m = patches[i];
      out << std::string_view(copied, static_cast<size_t>(m->data() - copied));
      if (m == &f.pid) out << rank;
      else if (m == &f.ts) out.micros(parse_ts_ns(f.ts) + shift_ns);
      else if (m == &f.tid) out << parse_number<int64_t>(f.tid, "tid") + kDeviceTid;
      else out << static_cast<int64_t>((static_cast<uint64_t>(r.rank) << 32) + id);
      copied = m->data() + m->size();
    }
    out << std::string_view(copied, static_cast<size_t>(end - copied));
    return end;
  });
}

// One rank's part of the merged trace: its process' name and its events.
void write_rank(const RankFile& r, int64_t base, Output& out, Tally& tally) {
  const std::string rank = std::to_string(r.rank);
  out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << rank << ",\"args\":{\"name\":\"rank " << rank
      << "\"}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" << rank
      << ",\"args\":{\"sort_index\":" << rank << "}}";
  tally.events += 2;
  try {
    copy_events(r, r.clock.origin_ns + r.clock.offset_ns - base, out, tally);
  } catch (const IOError& e) {
    throw IOError("merge: " + r.file->path() + " is not a trace: " + e.what());
  }
}

int merge(const std::string& dir, const std::string& out_path) {
  std::vector<RankFile> ranks = open_ranks(dir);
  int64_t base = ranks[0].clock.origin_ns + ranks[0].clock.offset_ns;
  int64_t error_ns = 0;
  bool unmeasured = false;
  for (const RankFile& r : ranks) {
    base = std::min(base, r.clock.origin_ns + r.clock.offset_ns);
    if (r.clock.error_ns < 0 && ranks.size() > 1) unmeasured = true;
    error_ns = std::max(error_ns, r.clock.error_ns);
  }
  // The ranks in parallel, in as many runs of consecutive ranks as there are cores: the first run
  // into the trace itself, the others into part files appended after it in rank order (the kernel
  // copies them, once).
  const size_t n = ranks.size();
  const size_t runs = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  const auto part_path = [&](size_t run) { return run ? out_path + ".part-" + std::to_string(run) : out_path; };
  std::vector<std::unique_ptr<Output>> parts(runs);
  std::vector<Tally> tallies(runs);
  std::vector<std::exception_ptr> errors(runs);
  for (size_t run = 0; run < runs; ++run) {
    parts[run] = std::make_unique<Output>(part_path(run));
    *parts[run] << (run ? ",\n" : "{\"traceEvents\":[\n");
  }
  auto work = [&](size_t run) {
    try {
      for (size_t i = run * n / runs; i < (run + 1) * n / runs; ++i) {
        if (i > run * n / runs) *parts[run] << ",\n";
        write_rank(ranks[i], base, *parts[run], tallies[run]);
      }
      if (run > 0) parts[run]->close();
    } catch (...) {
      errors[run] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t run = 1; run < runs; ++run) threads.emplace_back(work, run);
  work(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    parts.clear();  // closes them
    for (size_t run = 0; run < runs; ++run) std::filesystem::remove(part_path(run));
    std::rethrow_exception(e);
  }

  Output& out = *parts[0];
  Tally tally;
  for (size_t run = 0; run < runs; ++run) {
    if (run > 0) out.append(part_path(run));
    tally.events += tallies[run].events;
    tally.calls.insert(tally.calls.end(), tallies[run].calls.begin(), tallies[run].calls.end());
    tally.served.insert(tally.served.end(), tallies[run].served.begin(), tallies[run].served.end());
  }
  const double error_us = static_cast<double>(error_ns) / 1000.0;
  out << "\n],\"displayTimeUnit\":\"ms\",\"troupe\":{\"ranks\":" << static_cast<int64_t>(n) << ",\"clock_error_us\":";
  out.micros(error_ns);
  out << "}}\n";
  out.close();
  std::sort(tally.calls.begin(), tally.calls.end());
  std::sort(tally.served.begin(), tally.served.end());
  std::vector<uint64_t> matched;
  std::set_intersection(tally.calls.begin(), tally.calls.end(), tally.served.begin(), tally.served.end(),
                        std::back_inserter(matched));
  std::cout << "merged " << n << " rank(s), " << tally.events << " events into " << out_path << "; "
            << matched.size() << " of " << tally.calls.size() << " remote calls matched to their callee\n";
  if (unmeasured) std::cout << "clock offsets: not measured on some rank (its clock taken as rank 0's)\n";
  else std::cout << "clock offsets to rank 0: error <= " << error_us << " us\n";
  return 0;
}

}  // namespace

Command add_trace_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("trace", "Work with the ranks' traces of a job (TROUPE_TRACE=DIR)");
  app->require_subcommand(1);
  CLI::App* merge_app = app->add_subcommand("merge", "Merge DIR/rank-N.json into one Chrome/Perfetto trace");
  auto dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>("job.json");
  merge_app->add_option("dir", *dir, "The directory TROUPE_TRACE named")->required();
  merge_app->add_option("-o,--output", *out, "The merged trace (default job.json)");
  return {app, [dir, out] { return merge(*dir, *out); }};
}

}  // namespace troupe::cli
