// Seed 004's benchmark of all-reduce time against data size: an n x n float32
// matrix split by rows over 8 devices, and a psum over the device axis.
//
//   usage: allreduce_vs_size [CSV [SVG [MAX_N]]]
//   (defaults: allreduce_vs_size.csv, allreduce_vs_size.svg, 2048)
//
// The times go to the CSV file and to a log-log plot in the SVG file (the seed
// draws its plot with matplotlib); stdout gets only what does not change from
// run to run, the sizes and whether each psum equals the unsharded sum, so
// that ctest can compare it with allreduce_vs_size.expected.
//
// Sizes differ from the seed's [10, 100, 1000, 10000]: shard_map, like JAX,
// wants the rows to divide evenly over the 8 devices (10 and 100 do not), and
// 10000 x 10000 (400 MB) is too big for a test run; powers of two from 8 to
// MAX_N cover the same decades. Each size is timed two ways: the whole
// shard_map call, as the seed times its jitted call, and the psum alone
// (measured inside the body, on device 0).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <tessera/parallel.hpp>

using tessera::none;
using tessera::P;
using clock_type = std::chrono::steady_clock;

namespace {

struct measurement {
  std::size_t n = 0;
  std::size_t bytes_per_device = 0;
  int reps = 0;
  double call_median = 0, call_min = 0, psum_median = 0, psum_min = 0;
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t const h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// ---- the plot: hand-written SVG, log-log axes --------------------------------------------------
struct plot_frame {
  double left = 90, right = 610, top = 50, bottom = 370;  // the plotting area, in SVG pixels
  int x_lo, x_hi, y_lo, y_hi;                                // decades shown (powers of ten)
  double x(double v) const { return left + (std::log10(v) - x_lo) / (x_hi - x_lo) * (right - left); }
  double y(double v) const { return bottom - (std::log10(v) - y_lo) / (y_hi - y_lo) * (bottom - top); }
};

std::string svg_polyline(plot_frame const& f, std::vector<measurement> const& ms, double measurement::*field,
                         char const* color) {
  std::string s = "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\" points=\"";
  for (auto const& m : ms) s += std::to_string(f.x(static_cast<double>(m.n))) + "," + std::to_string(f.y(m.*field)) + " ";
  s += "\"/>\n";
  for (auto const& m : ms)
    s += "<circle cx=\"" + std::to_string(f.x(static_cast<double>(m.n))) + "\" cy=\"" + std::to_string(f.y(m.*field)) +
         "\" r=\"3.5\" fill=\"" + color + "\"/>\n";
  return s;
}

void write_svg(std::string const& path, std::vector<measurement> const& ms, int devices) {
  double tmin = 1e300, tmax = 0;
  for (auto const& m : ms) {
    tmin = std::min({tmin, m.call_median, m.psum_median});
    tmax = std::max({tmax, m.call_median, m.psum_median});
  }
  tmin = std::max(tmin, 1e-9);
  plot_frame f;
  f.x_lo = static_cast<int>(std::floor(std::log10(static_cast<double>(ms.front().n))));
  f.x_hi = static_cast<int>(std::ceil(std::log10(static_cast<double>(ms.back().n))));
  f.y_lo = static_cast<int>(std::floor(std::log10(tmin)));
  f.y_hi = std::max(static_cast<int>(std::ceil(std::log10(tmax))), f.y_lo + 1);
  if (f.x_hi == f.x_lo) ++f.x_hi;

  std::ofstream out(path);
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"660\" height=\"440\" viewBox=\"0 0 660 440\" "
         "font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"660\" height=\"440\" fill=\"white\"/>\n"
      << "<text x=\"350\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">All-reduce (psum) time by data size, "
      << devices << " devices</text>\n";
  // Grid and tick labels at every decade, faint lines at 2..9 times it (the log scale's minor ticks).
  for (int d = f.x_lo; d <= f.x_hi; ++d) {
    double const px = f.x(std::pow(10.0, d));
    out << "<line x1=\"" << px << "\" y1=\"" << f.top << "\" x2=\"" << px << "\" y2=\"" << f.bottom
        << "\" stroke=\"#bbb\"/>\n"
        << "<text x=\"" << px << "\" y=\"" << f.bottom + 18 << "\" text-anchor=\"middle\">10<tspan dy=\"-6\" "
        << "font-size=\"9\">" << d << "</tspan></text>\n";
    for (int k = 2; d < f.x_hi && k < 10; ++k) {
      double const mx = f.x(k * std::pow(10.0, d));
      out << "<line x1=\"" << mx << "\" y1=\"" << f.top << "\" x2=\"" << mx << "\" y2=\"" << f.bottom
          << "\" stroke=\"#eee\"/>\n";
    }
  }
  for (int d = f.y_lo; d <= f.y_hi; ++d) {
    double const py = f.y(std::pow(10.0, d));
    out << "<line x1=\"" << f.left << "\" y1=\"" << py << "\" x2=\"" << f.right << "\" y2=\"" << py
        << "\" stroke=\"#bbb\"/>\n"
        << "<text x=\"" << f.left - 8 << "\" y=\"" << py + 4 << "\" text-anchor=\"end\">10<tspan dy=\"-6\" "
        << "font-size=\"9\">" << d << "</tspan></text>\n";
    for (int k = 2; d < f.y_hi && k < 10; ++k) {
      double const my = f.y(k * std::pow(10.0, d));
      out << "<line x1=\"" << f.left << "\" y1=\"" << my << "\" x2=\"" << f.right << "\" y2=\"" << my
          << "\" stroke=\"#eee\"/>\n";
    }
  }
  out << "<rect x=\"" << f.left << "\" y=\"" << f.top << "\" width=\"" << f.right - f.left << "\" height=\""
      << f.bottom - f.top << "\" fill=\"none\" stroke=\"black\"/>\n"
      << "<text x=\"" << (f.left + f.right) / 2 << "\" y=\"" << f.bottom + 42
      << "\" text-anchor=\"middle\">Matrix size n (n x n float32, rows split over " << devices << " devices)</text>\n"
      << "<text transform=\"translate(30," << (f.top + f.bottom) / 2
      << ") rotate(-90)\" text-anchor=\"middle\">Time (seconds, median)</text>\n"
      << svg_polyline(f, ms, &measurement::call_median, "#1f77b4")
      << svg_polyline(f, ms, &measurement::psum_median, "#ff7f0e")
      // Legend, top left inside the plot.
      << "<rect x=\"" << f.left + 10 << "\" y=\"" << f.top + 10
      << "\" width=\"230\" height=\"46\" fill=\"white\" stroke=\"#999\"/>\n"
      << "<line x1=\"" << f.left + 18 << "\" y1=\"" << f.top + 26 << "\" x2=\"" << f.left + 42 << "\" y2=\""
      << f.top + 26 << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << f.left + 48 << "\" y=\"" << f.top + 30 << "\">whole shard_map call</text>\n"
      << "<line x1=\"" << f.left + 18 << "\" y1=\"" << f.top + 44 << "\" x2=\"" << f.left + 42 << "\" y2=\""
      << f.top + 44 << "\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << f.left + 48 << "\" y=\"" << f.top + 48 << "\">psum alone (device 0)</text>\n"
      << "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string const csv_path = argc > 1 ? argv[1] : "allreduce_vs_size.csv";
  std::string const svg_path = argc > 2 ? argv[2] : "allreduce_vs_size.svg";
  std::size_t const max_n = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 2048;

  tessera::runtime rt{8};
  int const devices = tessera::device_count();
  // mesh_1d = Mesh(devices, axis_names=('devices',))
  auto const mesh_1d = tessera::make_mesh<"devices">({devices});
  auto const row_sharding = tessera::named_sharding(mesh_1d, P<"devices", none>{});

  // @jax.jit def all_reduce(x): return jax.lax.psum(x, axis_name='devices')
  // as a shard_map over the row blocks; the sum is the same on every device, hence out_specs=P().
  double psum_seconds = 0;  // written by device 0 only
  auto all_reduce = tessera::shard_map(
      [&psum_seconds](auto x) {
        auto const t0 = clock_type::now();
        auto summed = tessera::psum<"devices">(x);
        if (tessera::axis_index<"devices">() == 0) psum_seconds = seconds_since(t0);
        return summed;
      },
      mesh_1d, tessera::in_specs(P<"devices", none>{}), tessera::out_specs(P<>{}));

  std::vector<measurement> results;
  bool all_ok = true;
  for (std::size_t n = static_cast<std::size_t>(devices); n <= max_n; n *= 2) {
    std::size_t const rows = n / static_cast<std::size_t>(devices);
    // data = jnp.ones((size, size)) in the seed; distinct small integers here, so that the check below
    // would notice blocks added in the wrong places. Their sums are exact in float32.
    auto data = xt::xtensor<float, 2>::from_shape({n, n});
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < n; ++c) data.data()[r * n + c] = static_cast<float>((r + 2 * c) % 7);
    auto const sharded_data = tessera::device_put(data, row_sharding);

    (void)all_reduce(sharded_data);  // warm-up: first touch of the result buffers
    measurement m;
    m.n = n;
    m.bytes_per_device = rows * n * sizeof(float);
    std::vector<double> call_times, psum_times;
    auto const start = clock_type::now();
    // At least 5 runs, and more while they take under 0.2 s in all.
    while (call_times.size() < 5 || (seconds_since(start) < 0.2 && call_times.size() < 1000)) {
      auto const t0 = clock_type::now();
      // The seed's all_reduce(sharded_data).block_until_ready(): from its second call the
      // shard_map is queued (async dispatch), so the call alone returns before the psum has run,
      // and psum_seconds, written by device 0, is read only after the wait.
      auto const r = tessera::block_until_ready(all_reduce(sharded_data));
      call_times.push_back(seconds_since(t0));  // before r (and its buffers) is released
      (void)r;
      psum_times.push_back(psum_seconds);
    }
    m.reps = static_cast<int>(call_times.size());
    m.call_median = median(call_times);
    m.call_min = *std::min_element(call_times.begin(), call_times.end());
    m.psum_median = median(psum_times);
    m.psum_min = *std::min_element(psum_times.begin(), psum_times.end());
    results.push_back(m);

    // The unsharded computation: the n/8 x n blocks of rows added together.
    auto const got = tessera::to_host(all_reduce(sharded_data));
    bool ok = got.shape()[0] == rows && got.shape()[1] == n;
    for (std::size_t i = 0; ok && i < rows * n; ++i) {
      float expected = 0;
      for (std::size_t d = 0; d < static_cast<std::size_t>(devices); ++d) expected += data.data()[d * rows * n + i];
      ok = got.data()[i] == expected;
    }
    all_ok &= ok;
    std::printf("Size %zux%zu: psum of %d blocks of (%zu, %zu), matches unsharded: %s\n", n, n, devices, rows, n,
                ok ? "true" : "false");
  }

  std::ofstream csv(csv_path);
  csv << "n,elements_per_device,bytes_per_device,devices,reps,call_median_s,call_min_s,psum_median_s,psum_min_s\n";
  for (auto const& m : results) {
    char line[256];
    std::snprintf(line, sizeof line, "%zu,%zu,%zu,%d,%d,%.9g,%.9g,%.9g,%.9g\n", m.n, m.bytes_per_device / sizeof(float),
                  m.bytes_per_device, devices, m.reps, m.call_median, m.call_min, m.psum_median, m.psum_min);
    csv << line;
  }
  write_svg(svg_path, results, devices);
  if (!csv || !std::ofstream(svg_path, std::ios::app)) {
    std::fprintf(stderr, "could not write %s or %s\n", csv_path.c_str(), svg_path.c_str());
    return 1;
  }
  std::printf("times written to %s, plot to %s\n", csv_path.c_str(), svg_path.c_str());
  return all_ok ? 0 : 1;
}
