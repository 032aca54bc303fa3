// `troupe trace merge DIR -o job.json`: the ranks' traces of one job (TROUPE_TRACE=DIR or `troupe
// launch --trace DIR` wrote DIR/rank-N.json) as one Chrome/Perfetto trace: a process per rank,
// each rank's lanes as they were, timestamps moved onto rank 0's clock by the offsets each rank
// measured at connect (actors/profiler.h), remote calls as arrows from the caller's span to the
// callee's. It prints the bound on the clock error: the largest of the ranks' (half their best
// ping-pong round trip).
//
//   TROUPE_TRACE=/tmp/t build/bin/troupe launch --nproc 2 -- build/bin/remote_bench
//   build/bin/troupe trace merge /tmp/t -o job.json   # open in https://ui.perfetto.dev
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "devices/error.h"
#include "examples/troupe/commands.h"

namespace troupe::cli {

namespace {

using nlohmann::json;

struct RankTrace {
  int rank = 0;
  json events;
  int64_t origin_ns = 0, offset_ns = 0, error_ns = -1;
};

std::vector<RankTrace> read_ranks(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw UsageError("merge: " + dir + " is not a directory");
  std::vector<RankTrace> ranks;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    json doc;
    try {
      doc = json::parse(in);
    } catch (const json::exception& e) {
      throw IOError("merge: " + entry.path().string() + " is not a trace: " + e.what());
    }
    RankTrace t;
    t.rank = std::stoi(name.substr(5));
    t.events = std::move(doc["traceEvents"]);
    if (doc.contains("troupe")) {
      const json& clock = doc["troupe"];
      t.origin_ns = clock.value("origin_ns", int64_t{0});
      t.offset_ns = clock.value("clock_offset_ns", int64_t{0});
      t.error_ns = clock.value("clock_error_ns", int64_t{-1});
    }
    ranks.push_back(std::move(t));
  }
  if (ranks.empty()) throw UsageError("merge: no rank-N.json in " + dir + " (was TROUPE_TRACE set?)");
  std::sort(ranks.begin(), ranks.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  return ranks;
}

int merge(const std::string& dir, const std::string& out_path) {
  std::vector<RankTrace> ranks = read_ranks(dir);
  int64_t base = ranks[0].origin_ns + ranks[0].offset_ns;
  for (const RankTrace& t : ranks) base = std::min(base, t.origin_ns + t.offset_ns);
  int64_t error_ns = 0;
  bool unmeasured = false;
  json merged = json::array();
  std::set<uint64_t> calls, served;
  for (RankTrace& t : ranks) {
    if (t.error_ns < 0 && ranks.size() > 1) unmeasured = true;
    error_ns = std::max(error_ns, t.error_ns);
    const double shift_us = static_cast<double>(t.origin_ns + t.offset_ns - base) / 1000.0;
    merged.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", t.rank}, {"args", {{"name", "rank " + std::to_string(t.rank)}}}});
    merged.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", t.rank}, {"args", {{"sort_index", t.rank}}}});
    for (json& e : t.events) {
      e["pid"] = t.rank;
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + shift_us;
      const std::string cat = e.value("cat", "");
      const std::string ph = e.value("ph", "");
      // Fork ids are per process: rank * 2^32 + id keeps them apart (remote ids sit at 2^52 and up).
      if (cat == "fork" && e.contains("id")) e["id"] = (static_cast<uint64_t>(t.rank) << 32) + e["id"].get<uint64_t>();
      if (cat == "remote" && ph == "s") calls.insert(e["id"].get<uint64_t>());
      if (cat == "remote" && ph == "f") served.insert(e["id"].get<uint64_t>());
      merged.push_back(std::move(e));
    }
  }
  std::ofstream out(out_path);
  if (!out) throw IOError("merge: cannot write " + out_path);
  const double error_us = static_cast<double>(error_ns) / 1000.0;
  out << json{{"traceEvents", merged}, {"displayTimeUnit", "ms"},
              {"troupe", {{"ranks", ranks.size()}, {"clock_error_us", error_us}}}}
             .dump();
  if (!out) throw IOError("merge: writing " + out_path + " failed");
  size_t matched = 0;
  for (uint64_t id : calls) matched += served.count(id);
  std::cout << "merged " << ranks.size() << " rank(s), " << merged.size() << " events into " << out_path << "; "
            << matched << " of " << calls.size() << " remote calls matched to their callee\n";
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
