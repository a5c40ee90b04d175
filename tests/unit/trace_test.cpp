// tessera::trace: the spans it records are checked against what the program is known to
// do (which devices, which collectives, how many bytes, as collective_counter and the
// shapes say), the JSON is parsed back with nlohmann/json, and a device held back on
// purpose shows up as the others' waiting time.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using tessera::P;
using tessera::runtime;
using tessera::trace_event;
using tessera_test::same_array;

namespace {

std::vector<trace_event> of(std::vector<trace_event> const& ev, std::string const& category,
                            std::string const& name = {}) {
  std::vector<trace_event> out;
  for (auto const& e : ev)
    if (e.category == category && (name.empty() || e.name == name)) out.push_back(e);
  return out;
}

std::set<int> devices_of(std::vector<trace_event> const& ev) {
  std::set<int> d;
  for (auto const& e : ev) d.insert(e.device);
  return d;
}

}  // namespace

TEST_CASE("nothing is recorded without a trace, and a trace sees only what began while it lived", "[trace]") {
  runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  xt::xtensor<float, 1> const h = xt::arange<float>(8.0f);
  auto a = tessera::device_put(h, tessera::named_sharding(m, P<"x">{}));  // untraced
  tessera::trace t;
  CHECK(t.events().empty());
  auto b = tessera::to_host(a);
  t.stop();
  auto c = tessera::to_host(a);  // after stop: not recorded
  auto const ev = t.events();
  CHECK(of(ev, "transfer", "to_host").size() == 2);
  CHECK(of(ev, "transfer", "device_put").empty());
  CHECK(same_array(b, h));
  CHECK(same_array(c, h));
}

TEST_CASE("device_put, a fused pass, a reduction's all-reduce and to_host, on every device's track", "[trace]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(64.0f), {16, 4});
  tessera::trace t;
  tessera::collective_counter counter;
  auto a = tessera::device_put(h, tessera::named_sharding(m, P<"x", tessera::none>{}));
  tessera::array y = 2.0f * tessera::sin(a) + 1.0f;
  tessera::array s = tessera::sum<0>(y);  // column sums: an all-reduce over 'x'
  auto const host = tessera::to_host(s);
  auto const ev = t.events();

  // device_put: one span per device, 4 rows x 4 floats each.
  auto const puts = of(ev, "transfer", "device_put");
  REQUIRE(puts.size() == 4);
  CHECK(devices_of(puts) == std::set<int>{0, 1, 2, 3});
  for (auto const& e : puts) CHECK(e.bytes == 4 * 4 * sizeof(float));
  // The fused pass of 2*sin(a)+1: one per device, the same block size.
  auto const passes = of(ev, "evaluate", "evaluate");
  REQUIRE(passes.size() >= 4);
  CHECK(devices_of(passes) == std::set<int>{0, 1, 2, 3});
  // The all-reduce: once per device, as many operations as the counter saw.
  auto const reduces = of(ev, "collective", "all-reduce");
  REQUIRE(counter.count("all-reduce") == 1);
  REQUIRE(reduces.size() == 4);
  CHECK(devices_of(reduces) == std::set<int>{0, 1, 2, 3});
  for (auto const& e : reduces) {
    CHECK(e.bytes == 4 * sizeof(float));  // 4 column sums per device
    CHECK(e.wait_ns >= 0);
    CHECK(e.wait_ns <= e.duration_ns);
  }
  // to_host: a copy on each device holding a replica-0 block; s is replicated, so one device.
  CHECK(of(ev, "transfer", "to_host").size() == 1);
  // Every device span lies inside a task span of its own device; the host has dispatch spans.
  auto const tasks = of(ev, "dispatch", "task");
  for (auto const& e : ev) {
    if (e.device < 0 || e.category == "dispatch") continue;
    bool const inside = std::any_of(tasks.begin(), tasks.end(), [&](trace_event const& k) {
      return k.device == e.device && k.process == e.process && k.start_ns <= e.start_ns &&
             e.start_ns + e.duration_ns <= k.start_ns + k.duration_ns;
    });
    CHECK(inside);
  }
  auto const dispatches = of(ev, "dispatch", "dispatch");
  REQUIRE(!dispatches.empty());
  for (auto const& e : dispatches) CHECK(e.device == -1);
  xt::xtensor<float, 1> const want = xt::sum(2.0f * xt::sin(h) + 1.0f, {0});
  CHECK(static_cast<bool>(xt::allclose(host, want)));
}

TEST_CASE("a device that arrives late shows up as the others' wait in the collective", "[trace]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  tessera::trace t;
  auto f = tessera::shard_map(
      [](auto blk) {
        if (tessera::axis_index<"x">() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(60));
        return tessera::psum<"x">(xt::xtensor<float, 1>(blk));
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
  auto const r = tessera::to_host(f(xt::arange<float>(8.0f)));
  CHECK(same_array(r, xt::xtensor<float, 1>{12.0f, 16.0f}));
  auto const reduces = of(t.events(), "collective", "all-reduce");
  REQUIRE(reduces.size() == 4);
  for (auto const& e : reduces) {
    INFO("device " << e.device << " waited " << e.wait_ns << " ns");
    if (e.device == 2) CHECK(e.wait_ns < 50'000'000);
    else CHECK(e.wait_ns >= 50'000'000);  // held for device 2's 60 ms
    CHECK(e.detail.find("'x'") != std::string::npos);
    CHECK(e.bytes == 2 * sizeof(float));
  }
}

TEST_CASE("the JSON is Chrome trace-event format with a named track per device", "[trace]") {
  runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  tessera::trace outer;
  std::string json;
  {
    tessera::trace inner;
    auto a = tessera::device_put(xt::xtensor<double, 1>(xt::arange<double>(6.0)), tessera::named_sharding(m, P<"x">{}));
    (void)tessera::to_host(a);
    json = inner.json();
    CHECK(inner.events().size() == outer.events().size());  // nested traces see the same spans
  }
  auto const doc = nlohmann::json::parse(json);
  REQUIRE(doc.contains("traceEvents"));
  std::map<std::string, int> names;
  int complete = 0;
  for (auto const& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["args"]["name"].get<std::string>()]++;
    if (e["ph"] == "X") {
      ++complete;
      CHECK(e["dur"].get<double>() >= 0.0);
      CHECK(e["ts"].get<double>() >= 0.0);
      CHECK(e.contains("args"));
    }
  }
  CHECK(names.count("device 0") == 1);
  CHECK(names.count("device 1") == 1);
  CHECK(names.count("host thread") == 1);
  CHECK(complete == static_cast<int>(outer.events().size()));

  std::string const svg = tessera::trace_svg(outer);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("device 0") != std::string::npos);
  CHECK(svg.find("device 1") != std::string::npos);
  // One bar per span (plus the legend's five squares and the background).
  std::size_t bars = 0;
  for (std::size_t p = svg.find("<g><title>"); p != std::string::npos; p = svg.find("<g><title>", p + 1)) ++bars;
  CHECK(bars == outer.events().size());
}

TEST_CASE("trace errors name the path", "[trace]") {
  tessera::trace t;
  CHECK_THROWS_WITH(t.write_json(std::string("/nonexistent-dir/x.json")),
                    Catch::Matchers::Contains("cannot open '/nonexistent-dir/x.json'"));
}

TEST_CASE("the sum of a matmul's partial results and a reshard are traced as their collectives", "[trace]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  auto a = tessera::device_put(h, tessera::named_sharding(m, P<"x", tessera::none>{}));
  tessera::trace t;
  tessera::collective_counter counter;
  tessera::array g = tessera::matmul(tessera::transpose(a), a);  // contracting over 'x': partial sums
  tessera::array r = tessera::reshard(a, P<tessera::none, "x">{});  // an all-to-all
  // Both are queued (asynchronous dispatch): their spans end when the devices have run them.
  g.block_until_ready();
  r.block_until_ready();
  auto const ev = t.events();
  auto const reduces = of(ev, "collective", "all-reduce");
  REQUIRE(counter.count("all-reduce") == 1);
  REQUIRE(reduces.size() == 4);
  for (auto const& e : reduces) CHECK(e.detail.find("all-reduce over ('x'") != std::string::npos);
  auto const events = counter.events();
  std::string kinds;
  for (auto const& e : events)
    if (e.kind != "all-reduce") kinds += (kinds.empty() ? "" : " + ") + e.kind;
  REQUIRE(!kinds.empty());
  CHECK(of(ev, "collective", kinds).size() == 4);
}
