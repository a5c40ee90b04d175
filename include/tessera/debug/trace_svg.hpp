#pragma once
// A tessera::trace drawn as an SVG timeline a person can read without a trace viewer: a row
// per device (and one for the host threads), a bar per span, coloured by category; a
// collective's bar is darkened for the share of it spent waiting for the other devices.
// Hovering a bar shows its name, duration, bytes, wait and detail.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/runtime/trace.hpp"

namespace tessera {

namespace detail {

inline char const* trace_colour(std::string const& category) {
  if (category == "evaluate") return "#4e79a7";
  if (category == "collective") return "#f28e2b";
  if (category == "transfer") return "#59a14f";
  return "#d9d9d9";  // dispatch: the task a device runs, under everything it does
}

inline void xml_escape(std::ostream& os, std::string const& s) {
  for (char c : s) {
    switch (c) {
      case '<': os << "&lt;"; break;
      case '>': os << "&gt;"; break;
      case '&': os << "&amp;"; break;
      case '"': os << "&quot;"; break;
      default: os << c;
    }
  }
}

}  // namespace detail

/// The trace's events as an SVG timeline (what Perfetto shows for jax.profiler traces).
inline std::string trace_svg(std::vector<trace_event> const& events) {
  constexpr int width = 1200, label = 150, row = 28, top = 56, right = 20;
  std::vector<std::pair<int, int>> tracks;
  std::int64_t end = 1;
  for (auto const& e : events) {
    if (std::find(tracks.begin(), tracks.end(), std::pair{e.process, e.device}) == tracks.end())
      tracks.emplace_back(e.process, e.device);
    end = std::max(end, e.start_ns + e.duration_ns);
  }
  // Host threads first, then each runtime's devices in order.
  std::sort(tracks.begin(), tracks.end());
  int const height = top + row * static_cast<int>(tracks.size()) + 30;
  double const scale = static_cast<double>(width - label - right) / static_cast<double>(end);
  auto x_of = [&](std::int64_t ns) { return label + static_cast<double>(ns) * scale; };

  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Legend.
  int lx = label;
  for (char const* c : {"dispatch", "evaluate", "collective", "transfer"}) {
    os << "<rect x=\"" << lx << "\" y=\"8\" width=\"14\" height=\"14\" fill=\"" << detail::trace_colour(c) << "\"/>";
    os << "<text x=\"" << lx + 18 << "\" y=\"20\">" << c << "</text>\n";
    lx += 110;
  }
  os << "<rect x=\"" << lx << "\" y=\"8\" width=\"14\" height=\"14\" fill=\"black\" fill-opacity=\"0.45\"/>";
  os << "<text x=\"" << lx + 18 << "\" y=\"20\">waiting for other devices</text>\n";
  // Time axis: five ticks.
  for (int i = 0; i <= 4; ++i) {
    std::int64_t const t = end * i / 4;
    double const x = x_of(t);
    os << "<line x1=\"" << x << "\" y1=\"" << top - 8 << "\" x2=\"" << x << "\" y2=\"" << height - 24
       << "\" stroke=\"#bbbbbb\" stroke-dasharray=\"2,3\"/>";
    os << "<text x=\"" << x << "\" y=\"" << top - 12 << "\" text-anchor=\"middle\">"
       << static_cast<double>(t) / 1e6 << " ms</text>\n";
  }
  for (std::size_t r = 0; r < tracks.size(); ++r) {
    auto const [p, d] = tracks[r];
    int const y = top + row * static_cast<int>(r);
    os << "<text x=\"8\" y=\"" << y + row / 2 + 4 << "\">"
       << (d < 0 ? std::string("host") : "runtime " + std::to_string(p) + " device " + std::to_string(d)) << "</text>\n";
    // Longer spans first, so the shorter ones they contain are drawn on top of them.
    std::vector<trace_event const*> mine;
    for (auto const& e : events)
      if (e.process == p && e.device == d) mine.push_back(&e);
    std::stable_sort(mine.begin(), mine.end(),
                     [](auto const* a, auto const* b) { return a->duration_ns > b->duration_ns; });
    for (auto const* e : mine) {
      bool const outer = e->category == "dispatch";
      double const x = x_of(e->start_ns);
      double const w = std::max(1.0, static_cast<double>(e->duration_ns) * scale);
      double const h = outer ? row - 4 : row - 10;
      double const yy = outer ? y + 2 : y + 5;
      os << "<g><title>";
      detail::xml_escape(os, e->name);
      os << ": " << static_cast<double>(e->duration_ns) / 1e3 << " us";
      if (e->bytes) os << ", " << e->bytes << " bytes";
      if (e->wait_ns) os << ", waited " << static_cast<double>(e->wait_ns) / 1e3 << " us";
      if (!e->detail.empty()) {
        os << "; ";
        detail::xml_escape(os, e->detail);
      }
      os << "</title><rect x=\"" << x << "\" y=\"" << yy << "\" width=\"" << w << "\" height=\"" << h << "\" fill=\""
         << detail::trace_colour(e->category) << "\" stroke=\"white\" stroke-width=\"0.5\"/>";
      if (e->wait_ns > 0) {
        double const ww = std::min(w, static_cast<double>(e->wait_ns) * scale);
        os << "<rect x=\"" << x << "\" y=\"" << yy << "\" width=\"" << ww << "\" height=\"" << h
           << "\" fill=\"black\" fill-opacity=\"0.45\"/>";
      }
      os << "</g>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

/// trace_svg of what `t` recorded.
inline std::string trace_svg(trace const& t) { return trace_svg(t.events()); }

/// Writes trace_svg(t) to `path`; throws std::runtime_error naming the path if it cannot.
inline void write_trace_svg(trace const& t, std::string const& path) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("tessera::write_trace_svg: cannot open '" + path + "' for writing");
  f << trace_svg(t);
  if (!f) throw std::runtime_error("tessera::write_trace_svg: writing '" + path + "' failed");
}

}  // namespace tessera
