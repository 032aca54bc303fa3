#pragma once
// What a Mesh handle points at (internal to net/remote/mesh*.cpp): the members, the relays that
// carry calls to them, and the calls made from this rank whose answers are still coming. It lives
// on the rank that spawned the mesh, whose requests the relays answer (mesh_call.cpp); a lost rank
// fails what it held (mesh_supervision.cpp).
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "actors/observe/metrics.h"
#include "net/remote/mesh.h"
#include "net/remote/mesh_tree.h"

namespace troupe::net::detail {

struct MeshMember {
  MeshPoint point;
  std::string name;  // "<mesh>[1,0]"
  RemoteActor actor;  // the spawning handle: it follows restarts and keeps the state
};

// How a method's reductions come back when its answers are large, chosen by measurement: up a
// chain of the ranks in chunks (mesh_chain_reduce.h; the hops overlap, which wins where links are
// slower than the CPUs) or each relay's whole partial up the tree (fewer messages and copies, which
// wins where the CPUs are the limit). Each way is timed twice (its first call pays for first
// touches of memory), then the faster by its last time is taken, and every 16th call takes the
// other again, so a change of links or load is followed.
struct ReduceWays {
  size_t bytes = 0;                 // the last answer's, when a host tensor (else 0: always whole)
  double whole_s = 0, chain_s = 0;  // the last call's time each way
  int whole_calls = 0, chain_calls = 0;

  bool chain_next(size_t chunk_bytes) const {
    if (chunk_bytes == 0 || bytes < 2 * chunk_bytes || whole_calls < 2) return false;
    if (chain_calls < 2) return true;
    const bool faster_is_chain = chain_s < whole_s;
    return (whole_calls + chain_calls) % 16 == 15 ? !faster_is_chain : faster_is_chain;
  }
  void measured(bool chained, double seconds, size_t answer_bytes) {
    (chained ? chain_s : whole_s) = seconds;
    ++(chained ? chain_calls : whole_calls);
    bytes = answer_bytes;
  }
};

// A call made from this rank, until every answer has come.
struct MeshPendingCall {
  std::string method;
  bool reduce = false;
  ReduceOp op = ReduceOp::none;
  std::vector<size_t> members;     // whole-mesh indices, by position in the call
  std::vector<int> routed;         // per position: the rank its relay runs it on; -1: called directly
  std::vector<bool> answered;      // per position
  size_t left = 0;                 // positions not answered yet
  MemberAnswer answer;             // answers: per position
  Answer done;                     // reduce: the reduction
  int partials_left = 0;           // reduce: contributions still coming (child relays, direct members)
  Tensor reduced;
  int64_t reduced_members = 0;
  bool chained = false;                              // reduce: up a chain in chunks
  std::chrono::steady_clock::time_point started;     // reduce: for ReduceWays
  FanCall fan;                     // as sent, without nodes or streaming: what a re-send to one rank starts from
  std::vector<MeshNode> nodes;     // the ranks it went to
  std::vector<uint64_t> replies;   // the requests this rank awaits for it (dropped if it fails first)
};

struct MeshState : std::enable_shared_from_this<MeshState> {
  std::string name, type;
  MeshShape shape;
  std::vector<MeshMember> members;  // by index over the whole mesh
  int home = 0;                     // the rank that spawned it, and holds this state
  size_t chunk_bytes = 0;           // MeshOptions::chunk_bytes
  // For `troupe top` (this rank's /metrics): calls made through it, and its members per rank as
  // spawned (zero once stopped).
  metrics::Counter* calls = nullptr;
  std::map<int, metrics::Gauge*> members_on;

  std::mutex spawning;  // one relay spawn at a time
  std::mutex mutex;     // guards the below
  std::map<int, RemoteActor> relays;  // by rank
  std::map<int, uint64_t> relay_ids;  // their actor ids, by rank
  std::set<int> lost;                 // ranks lost since the spawn
  std::map<int64_t, MeshPendingCall> pending;
  int64_t next_call = 1;
  std::map<std::string, ReduceWays, std::less<>> reduce_ways;  // by method

  // "mesh 'm': member [host=1,gpu=0] ('m[1,0]') on rank 3: forward: "
  std::string describe(size_t member, int rank, std::string_view method) const;

  // --- calls (mesh_call.cpp) -----------------------------------------------------------------
  // A request of this rank that a relay answers for `call`, from `rank`: its members' answers,
  // or (reduce) its subtree's reduction.
  uint64_t await_reply(int64_t call, int rank, bool reduce);
  // A relay's answers for its members: [member, result, error] each.
  void on_answers(int64_t call, const WireValue& results);
  // A child relay's (or a direct member's) reduction of `count` members: a tensor, or an error.
  void on_partial(int64_t call, const WireValue& value, int64_t count);
  // A member called directly (its rank was lost and it is being restarted elsewhere).
  void on_direct(int64_t call, size_t position, WireValue&& result, std::exception_ptr error);
  // The relay on `rank`, spawned and watched on first use (blocking: not under the mutex).
  RemoteActor relay(int rank);
  // Its actor id (spawning it first when needed).
  uint64_t relay_id(int rank);
  // The call to the subtree rooted at nodes[0], through that rank's relay.
  void send_fan(FanCall fan, std::vector<MeshNode> nodes);

  // --- supervision (mesh_supervision.cpp) ----------------------------------------------------
  // A request awaited for `call` from `rank` failed: its rank was lost (rank_lost), or the answer
  // could not come (this rank closing, an answer that did not encode): that rank's part fails.
  void reply_failed(int64_t call, int rank, std::exception_ptr why);
  // The call ended before every awaited request was answered: they are dropped. With mutex held.
  void drop_replies(MeshPendingCall& call);
  // A relay's rank was lost: its members' pending answers fail, the ranks below it in the call's
  // tree are sent the call again (a relay runs a call once), a reduction that counted on it fails.
  void rank_lost(int rank, std::exception_ptr why);
};

}  // namespace troupe::net::detail
