// Checkpoints (issue 34): tessera::save / load / checkpoint_manager against the HDF5 C API read
// directly (dataset names, global shapes, attributes), host values (xtensor), and files broken on
// purpose (missing, not HDF5, truncated, flipped bytes, a missing or extra leaf, another shape or
// element type, a full disk). tests/CMakeLists.txt builds it only where HDF5 is found.

#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include "support.hpp"
#include "tessera/checkpoint.hpp"
#include "tessera/array.hpp"

#if TESSERA_HAS_HANA
#include <boost/hana.hpp>
#endif

// LeakSanitizer (scripts/test's asan stage): HDF5 1.10 loses a few KiB on its error paths when it
// reads the corrupted files below (17 blocks allocated inside libhdf5, none by tessera); those are
// HDF5's, not checked here.
extern "C" __attribute__((used)) char const* __lsan_default_suppressions() { return "leak:libhdf5\n"; }

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using tessera::none;
using tessera::P;

namespace {

auto mesh24() { return tessera::make_mesh<"x", "y">({2, 4}); }
using mesh_xy = decltype(mesh24());
using w_sharding = tessera::named_sharding<mesh_xy, P<"x", "y">>;
using b_sharding = tessera::named_sharding<mesh_xy, P<>>;
using w_array = tessera::array<float, 2, w_sharding>;
using b_array = tessera::array<float, 1, b_sharding>;
using n_array = tessera::array<std::int64_t, 1, tessera::named_sharding<mesh_xy, P<"y">>>;

/// A layer, as the seeds write {"w": ..., "b": ...} (a plain struct: fields named by index).
struct layer {
  w_array w;
  b_array b;
};
/// The same as a class template, so a struct of shape_dtype_structs can be restored into it.
template <class W, class B>
struct layer_t {
  W w;
  B b;
};
template <class W, class B>
layer_t(W, B) -> layer_t<W, B>;  // clang before 17 deduces no aggregate's template arguments

xt::xtensor<float, 2> w_host() { return xt::reshape_view(xt::arange<float>(60.0f) * 0.25f - 3.0f, {6, 10}); }
xt::xtensor<float, 1> b_host() { return xt::arange<float>(5.0f) + 100.0f; }
xt::xtensor<std::int64_t, 1> n_host() { return xt::arange<std::int64_t>(9) * std::int64_t{1000000007}; }

fs::path scratch(std::string const& name) {
  fs::path d = fs::temp_directory_path() / ("tessera_ckpt_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d / name;
}

/// A tree with a sharded matrix, a replicated vector, a tuple and an int64 leaf sharded unevenly.
auto make_tree() {
  auto m = mesh24();
  layer l{tessera::device_put(w_host(), w_sharding(m)), tessera::device_put(b_host(), b_sharding(m))};
  return std::make_tuple(l, std::make_pair(tessera::device_put(n_host(), tessera::named_sharding(m, P<"y">{})), l.b));
}

std::string string_attr(hid_t obj, char const* name) { return tessera::detail::read_string_attribute(obj, name); }

void flip_byte(fs::path const& p, std::uintmax_t offset) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (tessera::checkpoint_error const& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace

TEST_CASE("tree_leaf_paths: keystr-like names of every leaf", "[checkpoint]") {
  CHECK(tessera::tree_leaf_paths<float>() == std::vector<std::string>{""});
  CHECK(tessera::tree_leaf_paths<std::tuple<layer, std::pair<int, std::array<float, 2>>>>() ==
        std::vector<std::string>{"0/0", "0/1", "1/0", "1/1/0", "1/1/1"});
#if TESSERA_HAS_HANA
  namespace hana = boost::hana;
  auto map = hana::make_map(hana::make_pair(BOOST_HANA_STRING("w"), 1.0f),
                            hana::make_pair(BOOST_HANA_STRING("b"), std::make_tuple(2, 3)),
                            hana::make_pair(hana::int_c<7>, 4));
  CHECK(tessera::tree_leaf_paths(map) == std::vector<std::string>{"w", "b/0", "b/1", "7"});
#endif
}

TEST_CASE("save: one dataset per leaf with the global array and its attributes; load into other shardings",
          "[checkpoint]") {
  tessera::runtime rt{8};
  auto const tree = make_tree();
  auto const path = scratch("tree.h5").string();
  tessera::save(path, tree);
  CHECK_FALSE(fs::exists(path + ".tessera-tmp"));

  // The file read with HDF5 itself: names, global shapes, types, attributes and values.
  {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(f >= 0);
    CHECK(string_attr(f, "tessera_version") == TESSERA_VERSION_STRING);
    CHECK(tessera::detail::list_datasets(f) == std::set<std::string>{"0/0", "0/1", "1/0", "1/1"});
    hid_t d = H5Dopen2(f, "0/0", H5P_DEFAULT);
    hid_t s = H5Dget_space(d);
    hsize_t dims[2] = {};
    CHECK(H5Sget_simple_extent_ndims(s) == 2);
    H5Sget_simple_extent_dims(s, dims, nullptr);
    CHECK(dims[0] == 6);
    CHECK(dims[1] == 10);
    CHECK(string_attr(d, "sharding") ==
          "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P('x', 'y'), memory_kind=device)");
    CHECK(string_attr(d, "tessera_version") == TESSERA_VERSION_STRING);
    xt::xtensor<float, 2> back = xt::zeros<float>({6, 10});
    CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()) >= 0);
    CHECK(tessera_test::same_array(back, w_host()));
    hid_t t = H5Dget_type(d);
    CHECK(tessera::detail::h5_type_name(t) == "float32");
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
    hid_t n = H5Dopen2(f, "1/0", H5P_DEFAULT);
    xt::xtensor<std::int64_t, 1> nb = xt::zeros<std::int64_t>({9});
    CHECK(H5Dread(n, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, nb.data()) >= 0);
    CHECK(tessera_test::same_array(nb, n_host()));
    H5Dclose(n);
    H5Fclose(f);
  }

  // Replicated blocks are written once: a P() array on 8 devices plans one block.
  CHECK(tessera::detail::plan_leaf(std::get<0>(tree).b, "b").blocks.size() == 1);
  CHECK(tessera::detail::plan_leaf(std::get<0>(tree).w, "w").blocks.size() == 8);

  // Restored like itself: same types, same values.
  auto const same = tessera::load(path, tree);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(same)>, std::remove_cvref_t<decltype(tree)>>);
  CHECK(tessera_test::same_array(tessera::to_host(std::get<0>(same).w), w_host()));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<1>(same).first), n_host()));

  // Into other shardings: another spec on another mesh shape, 3 devices (uneven), one device.
  auto m42 = tessera::make_mesh<"a", "b">({4, 2});
  auto m3 = tessera::make_mesh<"z">({3}, std::vector<int>{5, 6, 7});
  using tessera::shape_dtype;
  auto target = std::make_tuple(
      layer_t{shape_dtype<float, 2>(tessera::named_sharding(m42, P<"b", "a">{})),
              shape_dtype<float>(tessera::shape_t<1>{5}, tessera::named_sharding(m3, P<"z">{}))},
      std::make_pair(shape_dtype<std::int64_t, 1>(tessera::single_device_sharding(2)),
                     shape_dtype<float, 1>(tessera::named_sharding(m3, P<>{}))));
  auto const r = tessera::load(path, target);
  auto const& rw = std::get<0>(r).w;
  STATIC_REQUIRE(std::is_same_v<typename std::remove_cvref_t<decltype(rw)>::sharding_type,
                                tessera::named_sharding<decltype(m42), P<"b", "a">>>);
  CHECK(rw.shape() == tessera::shape_t<2>{6, 10});
  CHECK(tessera_test::same_array(tessera::to_host(rw), w_host()));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<0>(r).b), b_host()));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<1>(r).first), n_host()));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<1>(r).second), b_host()));

  // One leaf.
  auto const one = tessera::load<float, 2>(path, "0/0", tessera::named_sharding(m3, P<none, "z">{}));
  CHECK(tessera_test::same_array(tessera::to_host(one), w_host()));

  // Without the checksum: contiguous datasets, the same values.
  tessera::save(path, tree, {.checksum = false});
  CHECK(tessera_test::same_array(tessera::to_host(std::get<0>(tessera::load(path, tree)).w), w_host()));
  fs::remove_all(fs::path(path).parent_path());
}

// Blocks whose contiguous runs reach 64 KiB are written with pwrite/O_DIRECT at HDF5's offsets and
// read with pread (checkpoint/raw_io.hpp): runs that start and end off the 4 KiB grid, several
// runs per block, uneven blocks; checked against HDF5's own H5Dread and the host values.
TEST_CASE("save/load: large blocks go around H5Dwrite and H5Dread, into a valid HDF5 file", "[checkpoint]") {
  tessera::runtime rt{8};
  auto m = mesh24();
  auto const path = scratch("raw.h5").string();
  xt::xtensor<float, 2> a = xt::reshape_view(xt::arange<float>(42.0f * 16411.0f) * 0.5f, {42, 16411});
  xt::xtensor<std::int32_t, 3> c = xt::reshape_view(xt::arange<std::int32_t>(3 * 64 * 1100), {3, 64, 1100});
  auto const tree = std::make_tuple(tessera::device_put(a, tessera::named_sharding(m, P<"x", none>{})),
                                    tessera::device_put(c, tessera::named_sharding(m, P<none, "y", none>{})),
                                    tessera::device_put(a, tessera::named_sharding(tessera::make_mesh<"z">({5}), P<"z", none>{})));
  auto p0 = tessera::detail::plan_leaf(std::get<0>(tree), "0");
  REQUIRE(tessera::detail::writes_raw(p0, {}));
  REQUIRE(tessera::detail::writes_raw(tessera::detail::plan_leaf(std::get<1>(tree), "1"), {}));
  tessera::save(path, tree);
  {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(f >= 0);
    xt::xtensor<float, 2> back = xt::zeros<float>({42, 16411});
    hid_t d = H5Dopen2(f, "0", H5P_DEFAULT);
    CHECK(H5Dget_offset(d) % 4096 == 0);
    CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()) >= 0);
    CHECK(tessera_test::same_array(back, a));
    H5Dclose(d);
    d = H5Dopen2(f, "2", H5P_DEFAULT);
    back.fill(0.0f);
    CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()) >= 0);
    CHECK(tessera_test::same_array(back, a));
    H5Dclose(d);
    xt::xtensor<std::int32_t, 3> cb = xt::zeros<std::int32_t>({3, 64, 1100});
    d = H5Dopen2(f, "1", H5P_DEFAULT);
    CHECK(H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, cb.data()) >= 0);
    CHECK(tessera_test::same_array(cb, c));
    H5Dclose(d);
    H5Fclose(f);
  }
  // Read back raw (whole rows, runs of several rows) and through H5Dread (short runs).
  auto m3 = tessera::make_mesh<"z">({3});
  auto const r = tessera::load(path, std::make_tuple(
      tessera::shape_dtype<float, 2>(tessera::named_sharding(m3, P<"z", none>{})),
      tessera::shape_dtype<std::int32_t, 3>(tessera::named_sharding(m3, P<none, none, "z">{})),
      tessera::shape_dtype<float, 2>(tessera::single_device_sharding(4))));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<0>(r)), a));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<1>(r)), c));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<2>(r)), a));
  // Truncated inside a dataset's bytes: named, not read past.
  fs::resize_file(path, fs::file_size(path) - 5000);
  CHECK_THAT(error_of([&] { (void)tessera::load(path, tree); }), Contains("tessera::load: file '" + path + "'"));
  fs::remove_all(fs::path(path).parent_path());
}

TEST_CASE("load: bad input is a checkpoint_error naming the file, the leaf and the values", "[checkpoint]") {
  tessera::runtime rt{8};
  auto const tree = make_tree();
  auto const path = scratch("bad.h5").string();
  auto load_tree = [&] { (void)tessera::load(path, tree); };

  // Missing, and not HDF5.
  CHECK_THAT(error_of(load_tree), Contains("tessera::load: file '" + path + "': no such file"));
  { std::ofstream(path) << "not an HDF5 file, only text\n"; }
  CHECK_THAT(error_of(load_tree), Contains("not an HDF5 file (no HDF5 signature in its 28 bytes"));

  tessera::save(path, tree, {.checksum = true});  // the flips below are found in the data too
  auto const size = fs::file_size(path);
  auto const good = fs::path(path).parent_path() / "good.h5";
  fs::copy_file(path, good, fs::copy_options::overwrite_existing);

  // Missing and extra leaves, another shape, another element type, another rank.
  auto m = mesh24();
  auto w = std::get<0>(tree).w;
  auto b = std::get<0>(tree).b;
  CHECK_THAT(error_of([&] { (void)tessera::load(path, std::make_tuple(std::make_tuple(w, b), std::make_pair(std::get<1>(tree).first, b), b)); }),
             Contains("leaf '2': the file has no dataset '2' (it has '0/0', '0/1', '1/0', '1/1')"));
  CHECK_THAT(error_of([&] { (void)tessera::load(path, std::make_tuple(std::make_tuple(w, b))); }),
             Contains("file '" + path + "', leaf '1/0': the file has datasets '1/0', '1/1' that the target tree does not"));
  auto wrong_shape = std::make_tuple(
      layer_t{tessera::shape_dtype<float>(tessera::shape_t<2>{6, 12}, w_sharding(m)), b},
      std::make_pair(std::get<1>(tree).first, b));
  CHECK_THAT(error_of([&] { (void)tessera::load(path, wrong_shape); }),
             Contains("leaf '0/0': the file holds shape (6, 10) (rank 2), but shape (6, 12) was asked for"));
  CHECK_THAT(error_of([&] { (void)tessera::load<double, 2>(path, "0/0", w_sharding(m)); }),
             Contains("leaf '0/0': the file holds float32 elements, but float64 was asked for"));
  CHECK_THAT(error_of([&] { (void)tessera::load<std::int32_t, 1>(path, "1/0", b_sharding(m)); }),
             Contains("leaf '1/0': the file holds int64 elements, but int32 was asked for"));
  CHECK_THAT(error_of([&] { (void)tessera::load<float, 3>(path, "0/1", b_sharding(m)); }),
             Contains("leaf '0/1': the file holds shape (5,) (rank 1), but rank 3 was asked for"));

  // Truncated: at every tenth of the file, and one byte short.
  for (int k = 1; k <= 10; ++k) {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    fs::resize_file(path, k == 10 ? size - 1 : size * static_cast<std::uintmax_t>(k) / 10);
    auto const e = error_of(load_tree);
    INFO(e);
    CHECK_THAT(e, Contains("tessera::load: file '" + path + "'"));
    CHECK(e != "no exception");
  }
  // Flipped bytes: every byte of the file in turn would take long; every 97th byte, each alone.
  // Metadata carries HDF5's checksums, each block Fletcher-32: every flip is found.
  int found = 0, tried = 0;
  for (std::uintmax_t off = 0; off < size; off += 97) {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    flip_byte(path, off);
    ++tried;
    std::string e;
    try {
      auto const back = tessera::load(path, tree);
      // A flip HDF5 does not see (unused bytes, padding) must not change a value.
      bool const same = tessera_test::same_array(tessera::to_host(std::get<0>(back).w), w_host()) &&
                        tessera_test::same_array(tessera::to_host(std::get<0>(back).b), b_host()) &&
                        tessera_test::same_array(tessera::to_host(std::get<1>(back).first), n_host());
      INFO("flipped byte " << off << " of " << size << " changed a value without an error");
      CHECK(same);
    } catch (tessera::checkpoint_error const& ex) {
      ++found;
      CHECK_THAT(std::string(ex.what()), Contains("file '" + path + "'"));
    }
  }
  CHECK(found > 0);
  // Every failed load closed what it opened. (HDF5 1.10.8 itself keeps some internal free-list
  // blocks after rejecting a corrupted object header, and at exit prints "HDF5: infinite loop
  // closing library": docs/checkpoints.md, "Errors".)
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
  // A flip in a block: the leaf and the block are named.
  {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "1/0", H5P_DEFAULT);
    haddr_t addr = 0;
    hsize_t chunk_size = 0;
    hsize_t const origin[1] = {0};
    unsigned mask = 0;
    REQUIRE(H5Dget_chunk_info_by_coord(d, origin, &mask, &addr, &chunk_size) >= 0);
    H5Dclose(d);
    H5Fclose(f);
    flip_byte(path, addr + 1);
    CHECK_THAT(error_of(load_tree), Contains("leaf '1/0': reading the block [0:3] failed: the file is corrupted"));
  }
  fs::remove_all(fs::path(path).parent_path());
}

TEST_CASE("save: a full disk is a checkpoint_error, and the previous checkpoint stays whole", "[checkpoint]") {
  tessera::runtime rt{8};
  auto m = mesh24();
  // 2 MiB of float32: more than the small file system or file size limit below.
  auto big = tessera::device_put(xt::xtensor<float, 2>(xt::ones<float>({512, 1024})), w_sharding(m));
  auto small = tessera::device_put(w_host(), w_sharding(m));
  fs::path dir = scratch("full");
  fs::create_directories(dir);
  // A 1 MiB tmpfs where mounting is permitted (root, CAP_SYS_ADMIN); else a 1 MiB file size limit
  // (RLIMIT_FSIZE, with SIGXFSZ ignored, so writes past it fail with EFBIG).
  bool const mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") == 0;
  rlimit old{};
  auto old_handler = SIG_DFL;
  if (!mounted) {
    ::getrlimit(RLIMIT_FSIZE, &old);
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old;
    lim.rlim_cur = 1 << 20;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  INFO((mounted ? "a 1 MiB tmpfs" : "RLIMIT_FSIZE = 1 MiB"));
  auto const path = (dir / "ckpt.h5").string();
  tessera::save(path, std::make_tuple(small));
  auto const e = error_of([&] { tessera::save(path, std::make_tuple(small, big)); });
  // Rows: written with pwrite at HDF5's offsets (checkpoint/raw_io.hpp), which fail the same way.
  auto const big_rows = tessera::device_put(xt::xtensor<float, 2>(xt::ones<float>({512, 1024})),
                                            tessera::named_sharding(m, P<"x", none>{}));
  auto const e_rows = error_of([&] { tessera::save(path, std::make_tuple(small, big_rows)); });
  // The previous checkpoint is whole, the temporary file gone.
  bool const tmp_left = fs::exists(path + ".tessera-tmp");
  bool const whole = tessera_test::same_array(tessera::to_host(std::get<0>(tessera::load(path, std::make_tuple(small)))), w_host());
  if (mounted) ::umount(dir.c_str());
  else {
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
  CHECK_THAT(e, Contains("tessera::save: file '" + path + "'"));
  CHECK_THAT(e, Contains(mounted ? "No space left on device" : "File too large"));
  CHECK_THAT(e_rows, Contains("tessera::save: file '" + path + "'"));
  CHECK_THAT(e_rows, Contains(mounted ? "No space left on device" : "File too large"));
  CHECK_FALSE(tmp_left);
  CHECK(whole);
  fs::remove_all(dir.parent_path());
}

TEST_CASE("checkpoint_manager: saves in the background, keeps the newest max_to_keep, restores", "[checkpoint]") {
  tessera::runtime rt{8};
  auto m = mesh24();
  fs::path dir = scratch("mgr");
  auto params_at = [&](int step) {
    xt::xtensor<float, 2> w = w_host() + static_cast<float>(step);
    return layer{tessera::device_put(w, w_sharding(m)), tessera::device_put(b_host(), b_sharding(m))};
  };
  {
    tessera::checkpoint_manager mgr{dir, {.max_to_keep = 3}};
    CHECK_FALSE(mgr.latest_step().has_value());
    for (int step = 1; step <= 5; ++step) CHECK(mgr.save(step, params_at(step)));
    mgr.wait();
    CHECK(mgr.all_steps() == std::vector<std::int64_t>{3, 4, 5});
    CHECK(mgr.latest_step() == 5);
    CHECK_FALSE(mgr.save(4, params_at(4)));  // not newer than the latest: not saved (Orbax's should_save)
    auto const back = mgr.restore(4, params_at(0));
    CHECK(tessera_test::same_array(tessera::to_host(back.w), xt::xtensor<float, 2>(w_host() + 4.0f)));
    // The last save is in flight when the manager goes: its destructor waits for it.
    CHECK(mgr.save(6, params_at(6)));
  }
  CHECK(fs::exists(dir / "6.h5"));
  CHECK_FALSE(fs::exists(dir / "3.h5"));
  tessera::checkpoint_manager again{dir, {.max_to_keep = 3}};
  CHECK(again.latest_step() == 6);
  auto m3 = tessera::make_mesh<"z">({3});
  auto const re = again.restore(6, layer_t{tessera::shape_dtype<float, 2>(tessera::named_sharding(m3, P<"z">{})),
                                           tessera::shape_dtype<float, 1>(tessera::named_sharding(m3, P<"z">{}))});
  CHECK(tessera_test::same_array(tessera::to_host(re.w), xt::xtensor<float, 2>(w_host() + 6.0f)));
  // skip_while_busy: a save that finds the previous one still being written is skipped (the
  // writer is held in on_leaf_written here), force waits for it.
  {
    std::atomic<bool> release{false};
    tessera::checkpoint_manager_options o{.max_to_keep = 0, .skip_while_busy = true};
    o.save.on_leaf_written = [&](std::string const&) {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    tessera::checkpoint_manager busy{dir / "busy", o};
    CHECK(busy.save(1, params_at(1)));
    CHECK_FALSE(busy.save(2, params_at(2)));
    release = true;
    CHECK(busy.save(3, params_at(3), /*force=*/true));
    busy.wait();
    CHECK(busy.all_steps() == std::vector<std::int64_t>{1, 3});
    CHECK(tessera_test::same_array(tessera::to_host(busy.restore(3, params_at(0)).w), xt::xtensor<float, 2>(w_host() + 3.0f)));
  }
  // minimum_interval (Orbax's ContinuousCheckpointingPolicy(minimum_interval_secs)): a save that
  // starts sooner than that after the previous one is skipped, with either policy, even with the
  // previous save written; force saves anyway; once the interval has passed, saves are taken again.
  for (bool const skip : {false, true}) {
    fs::path const d = dir / (skip ? "interval_skip" : "interval_wait");
    tessera::checkpoint_manager_options o{.max_to_keep = 0, .skip_while_busy = skip};
    o.minimum_interval = std::chrono::hours(1);
    {
      tessera::checkpoint_manager m{d, o};
      CHECK(m.save(1, params_at(1)));
      m.wait();
      CHECK_FALSE(m.save(2, params_at(2)));
      CHECK(m.save(3, params_at(3), /*force=*/true));
      m.wait();
      CHECK(m.all_steps() == std::vector<std::int64_t>{1, 3});
    }
    o.minimum_interval = std::chrono::milliseconds(30);
    tessera::checkpoint_manager m{d, o};
    CHECK(m.save(4, params_at(4)));
    m.wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    CHECK(m.save(5, params_at(5)));
    m.wait();
    CHECK(m.all_steps() == std::vector<std::int64_t>{1, 3, 4, 5});
    CHECK(tessera_test::same_array(tessera::to_host(m.restore(5, params_at(0)).w), xt::xtensor<float, 2>(w_host() + 5.0f)));
  }
  // A failing background save throws from wait(), naming the file.
  fs::remove_all(dir);
  fs::create_directories(dir / "7.h5.tessera-tmp");  // a folder where the temporary file must go
  CHECK(again.save(7, params_at(7)));
  CHECK_THROWS_WITH(again.wait(), Contains("tessera::checkpoint_manager::save: file '" + (dir / "7.h5").string() + "'"));
  fs::remove_all(dir.parent_path());
}

// Run by tests/python/test_checkpoint_h5py.py (hidden from a plain run): saves a tree into
// $TESSERA_H5PY_DIR/tessera.h5 and prints its values, then loads $TESSERA_H5PY_DIR/h5py.h5, which
// h5py wrote, into shardings of its own and prints what it read.
TEST_CASE("h5py interop", "[.interop]") {
  char const* dir = std::getenv("TESSERA_H5PY_DIR");
  REQUIRE(dir != nullptr);
  tessera::runtime rt{8};
  auto m = mesh24();
  auto print = [](char const* what, std::string const& leaf, auto const& host) {
    std::printf("%s %s", what, leaf.c_str());
    for (auto v : host) std::printf(" %.17g", static_cast<double>(v));
    std::printf("\n");
  };
  auto const tree = make_tree();
  tessera::save(std::string(dir) + "/tessera.h5", tree);
  print("saved", "0/0", tessera::to_host(std::get<0>(tree).w));
  print("saved", "0/1", tessera::to_host(std::get<0>(tree).b));
  print("saved", "1/0", tessera::to_host(std::get<1>(tree).first));
  print("saved", "1/1", tessera::to_host(std::get<1>(tree).second));
  // h5py's file: "0" float32 (4, 6), "1/0" int32 (5,), "1/1" bool (3,): the paths of this tree.
  auto m42 = tessera::make_mesh<"a", "b">({4, 2});
  auto const back = tessera::load(
      std::string(dir) + "/h5py.h5",
      std::make_tuple(tessera::shape_dtype<float, 2>(tessera::named_sharding(m, P<"y", "x">{})),
                      std::make_pair(tessera::shape_dtype<std::int32_t, 1>(tessera::named_sharding(m42, P<"a">{})),
                                     tessera::shape_dtype<bool, 1>(tessera::named_sharding(m42, P<>{})))));
  print("loaded", "0", tessera::to_host(std::get<0>(back)));
  print("loaded", "1/0", tessera::to_host(std::get<1>(back).first));
  print("loaded", "1/1", tessera::to_host(std::get<1>(back).second));
  print("loaded-one", "0", tessera::to_host(tessera::load<float, 2>(std::string(dir) + "/h5py.h5", "0",
                                                                     tessera::single_device_sharding(3))));
}
