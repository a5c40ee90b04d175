#!/usr/bin/env python3
"""ctest packaging.conan_recipe: runs the methods of conan/conanfile.py and
conan/test_package/conanfile.py against small stand-ins for Conan 2's API.

This is not `conan create` (tools/conan_create.sh runs that, with Conan from PyPI): it
checks, without Conan and in a second, the recipe's attributes (header-library,
no_copy_source, license, the with_blas option off by default), the version ranges
requirements() asks for with and without BLAS (and no Boost), that validate() calls
check_min_cppstd(self, 20) and rejects old compilers, that package_id() clears the id,
that export_sources() followed by package() yields every header of include/ and the
LICENSE in licenses/, and what package_info() gives consumers: the CMake/pkg-config
names, and with with_blas=True the macro TESSERA_HAS_CBLAS and OpenBLAS (the package's,
or -lopenblas when a profile's [platform_requires] provides it). A method calling a Conan
function these stand-ins lack fails here with AttributeError.

usage: check_conan_recipe.py SOURCE_DIR VERSION WORK_DIR
"""

import fnmatch
import importlib.util
import os
import shutil
import sys
import types

failures = []
checks = 0


def check(condition, what):
    global checks
    checks += 1
    if not condition:
        failures.append(what)
        print(f"FAILED: {what}")


# --------------------------------------------------------------------------------------
# Stand-ins for the parts of Conan 2's API the recipes import.
# --------------------------------------------------------------------------------------
calls = []


class ConanInvalidConfiguration(Exception):
    pass


class ConanFile:
    pass


def check_min_cppstd(conanfile, cppstd):
    calls.append(("check_min_cppstd", str(cppstd)))


def can_run(conanfile):
    return True


def copy(conanfile, pattern, src, dst, keep_path=True, excludes=None):
    """Conan's copy(): files under src whose path relative to src matches pattern (so
    "LICENSE" is src/LICENSE only, and "*.hpp" any header, "*" matching "/" as well)."""
    copied = []
    for folder, _, names in os.walk(src):
        for name in names:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, src)
            if fnmatch.fnmatchcase(rel, pattern):
                target = os.path.join(dst, rel if keep_path else name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(path, target)
                copied.append(target)
    return copied


def basic_layout(conanfile, src_folder="."):
    calls.append(("basic_layout", src_folder))


def cmake_layout(conanfile, *args, **kwargs):
    calls.append(("cmake_layout",))


class CMake:
    def __init__(self, conanfile):
        self.conanfile = conanfile

    def configure(self, *args, **kwargs):
        calls.append(("cmake.configure",))

    def build(self, *args, **kwargs):
        calls.append(("cmake.build",))


class Version:
    def __init__(self, text):
        self.parts = tuple(int(p) if p.isdigit() else 0 for p in str(text).split("."))

    def _key(self, other):
        other = other if isinstance(other, Version) else Version(other)
        n = max(len(self.parts), len(other.parts))
        pad = lambda t: t + (0,) * (n - len(t))
        return pad(self.parts), pad(other.parts)

    def __lt__(self, other):
        a, b = self._key(other)
        return a < b

    def __ge__(self, other):
        return not self < other


def install_stubs():
    modules = {
        "conan": {"ConanFile": ConanFile},
        "conan.errors": {"ConanInvalidConfiguration": ConanInvalidConfiguration},
        "conan.tools": {},
        "conan.tools.build": {"check_min_cppstd": check_min_cppstd, "can_run": can_run},
        "conan.tools.files": {"copy": copy},
        "conan.tools.layout": {"basic_layout": basic_layout},
        "conan.tools.cmake": {"CMake": CMake, "cmake_layout": cmake_layout},
        "conan.tools.scm": {"Version": Version},
    }
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module


class Setting(str):
    """A settings value: compares as a string, may have sub-settings (compiler.version)."""

    def __new__(cls, value, **subs):
        obj = super().__new__(cls, value)
        obj.__dict__.update(subs)
        return obj


class Settings:
    def __init__(self, os_name="Linux", compiler="gcc", version="12", cppstd="20"):
        self.os = Setting(os_name)
        self.arch = Setting("x86_64")
        self.build_type = Setting("Release")
        self.compiler = Setting(compiler, version=Setting(version), cppstd=Setting(cppstd))

    def get_safe(self, name):
        value = self
        for part in name.split("."):
            value = getattr(value, part, None)
        return value


class Options:
    def __init__(self, values):
        self.__dict__.update(values)


class CppInfo:
    def __init__(self):
        self.properties = {}
        self.bindirs = ["bin"]
        self.libdirs = ["lib"]
        self.system_libs = []
        self.defines = []
        self.requires = []

    def set_property(self, name, value):
        self.properties[name] = value


class Dependency:
    """What self.dependencies maps to: a package folder, options; None for the folder of a
    [platform_requires] entry, which Conan's __getitem__ hides but items() lists."""

    def __init__(self, package_folder, options=None):
        self.package_folder = package_folder
        self.options = Options(options or {})


class Dependencies:
    def __init__(self, deps):
        self._deps = deps  # {name: Dependency}

    def items(self):
        return [(types.SimpleNamespace(ref=types.SimpleNamespace(name=n)), d)
                for n, d in self._deps.items()]

    def __getitem__(self, name):
        dep = self._deps.get(name)
        if dep is None or dep.package_folder is None:
            raise KeyError(f"'{name}' not found in the dependency set")
        return dep


class Info:
    def __init__(self):
        self.cleared = False

    def clear(self):
        self.cleared = True


def load_recipe(path):
    spec = importlib.util.spec_from_file_location(
        "recipe_" + os.path.basename(os.path.dirname(path)), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    classes = [c for c in vars(module).values()
               if isinstance(c, type) and issubclass(c, ConanFile) and c is not ConanFile]
    if len(classes) != 1:
        raise SystemExit(f"{path}: expected one ConanFile subclass, found {len(classes)}")
    return classes[0]


def instance(cls, options=None, settings=None, dependencies=None):
    obj = cls()
    obj.dependencies = Dependencies(dependencies or {})
    obj.settings = settings or Settings()
    # Options not given take the recipe's defaults, as Conan does (with_hdf5, issue 34).
    obj.options = Options({**getattr(cls, "default_options", {}), **(options or {})})
    obj.requires_calls = []
    obj.requires = lambda ref, **kw: obj.requires_calls.append((ref, kw))
    obj.info = Info()
    obj.cpp_info = CppInfo()
    obj.ref = f"{getattr(cls, 'name', 'pkg')}/{getattr(cls, 'version', '')}"
    obj.run_calls = []
    obj.run = lambda cmd, **kw: obj.run_calls.append((cmd, kw))
    return obj


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    source_dir, version, work_dir = sys.argv[1:]
    install_stubs()
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)

    # ---- conan/conanfile.py ----------------------------------------------------------
    recipe_path = os.path.join(source_dir, "conan", "conanfile.py")
    Recipe = load_recipe(recipe_path)
    check(Recipe.name == "tessera", f"name is {Recipe.name!r}")
    check(Recipe.version == version, f"version is {Recipe.version!r}, CMake says {version!r}")
    check(Recipe.package_type == "header-library", f"package_type is {Recipe.package_type!r}")
    check(getattr(Recipe, "no_copy_source", False) is True, "no_copy_source is not True")
    check(getattr(Recipe, "license", None) == "BSD-3-Clause",
          f"license is {getattr(Recipe, 'license', None)!r}, LICENSE is BSD-3-Clause")
    check("with_blas" in Recipe.options, "no with_blas option")
    check(Recipe.default_options.get("with_blas") is False, "with_blas is not False by default")
    check(not any(k.startswith("boost") for k in Recipe.default_options),
          f"default_options still configure Boost: {Recipe.default_options}")

    # requirements(), without and with BLAS: the supported ranges (docs/installation.md)
    ranges = {"xtensor": "[>=0.24 <0.28]", "xsimd": "[>=8 <15]"}
    for blas in (False, True):
        r = instance(Recipe, {"with_blas": blas})
        r.requirements()
        names = [ref.split("/")[0] for ref, _ in r.requires_calls]
        check("boost" not in names, f"with_blas={blas}: requirements() still requires boost")
        for dep, want in ranges.items():
            check(f"{dep}/{want}" in [ref for ref, _ in r.requires_calls],
                  f"with_blas={blas}: requirements() does not require {dep}/{want}: {r.requires_calls}")
        for ref, kw in r.requires_calls:
            version = ref.split("/")[1] if "/" in ref else ""
            check(version[:1].isdigit() or (version.startswith("[") and version.endswith("]")),
                  f"requirement {ref!r} has no version or version range")
            if ref.split("/")[0] in ranges:
                check(kw.get("transitive_headers") is True,
                      f"{ref}: tessera's headers include it, so it needs transitive_headers=True")
            if ref.split("/")[0] == "openblas":
                check(kw.get("transitive_libs") is True,
                      f"{ref}: consumers link cblas_sgemm, so it needs transitive_libs=True")
        check(("openblas" in names) == blas, f"with_blas={blas}: requirements() gives {names}")

    # package_id(), validate()
    r = instance(Recipe, {"with_blas": False})
    r.package_id()
    check(r.info.cleared, "package_id() does not clear the package id (self.info.clear())")
    del calls[:]
    r.validate()
    check(("check_min_cppstd", "20") in calls, "validate() does not call check_min_cppstd(self, 20)")
    for compiler, old in (("gcc", "11"), ("clang", "13")):
        r = instance(Recipe, {"with_blas": False}, Settings(compiler=compiler, version=old))
        try:
            r.validate()
            check(False, f"validate() accepts {compiler} {old}, older than the tested minimum")
        except ConanInvalidConfiguration as e:
            check(compiler in str(e), f"validate() message does not name the compiler: {e}")

    # export_sources() then package(): every header of include/ is packaged
    r = instance(Recipe, {"with_blas": False})
    r.recipe_folder = os.path.dirname(recipe_path)
    r.export_sources_folder = os.path.join(work_dir, "export_source")
    r.export_sources()
    r.layout()
    r.source_folder = r.export_sources_folder
    r.package_folder = os.path.join(work_dir, "package")
    r.source()
    r.build()
    r.package()
    include = os.path.join(source_dir, "include")
    want = sorted(os.path.relpath(os.path.join(d, f), include)
                  for d, _, fs in os.walk(include) for f in fs if f.endswith(".hpp"))
    pkg_include = os.path.join(r.package_folder, "include")
    got = sorted(os.path.relpath(os.path.join(d, f), pkg_include)
                 for d, _, fs in os.walk(pkg_include) for f in fs)
    check(got == want, f"package() gives {len(got)} headers, include/ has {len(want)}: "
                       f"missing {sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}")
    check("tessera/version.hpp" in got, "the package has no include/tessera/version.hpp")
    packaged_license = os.path.join(r.package_folder, "licenses", "LICENSE")
    check(os.path.isfile(packaged_license), "package() does not put LICENSE in licenses/")
    if os.path.isfile(packaged_license):
        with open(packaged_license) as a, open(os.path.join(source_dir, "LICENSE")) as b:
            check(a.read() == b.read(), "licenses/LICENSE differs from the checkout's LICENSE")

    # package_info(), without BLAS
    r.package_info()
    props = r.cpp_info.properties
    check(props.get("cmake_file_name") == "tessera", f"cmake_file_name is {props.get('cmake_file_name')!r}")
    check(props.get("cmake_target_name") == "tessera::tessera",
          f"cmake_target_name is {props.get('cmake_target_name')!r}")
    check(props.get("pkg_config_name") == "tessera", f"pkg_config_name is {props.get('pkg_config_name')!r}")
    check(r.cpp_info.bindirs == [] and r.cpp_info.libdirs == [],
          "header-only: bindirs and libdirs should be empty")
    check("pthread" in r.cpp_info.system_libs, "Linux: pthread is not in system_libs")
    check(sorted(r.cpp_info.requires) == ["xsimd::xsimd", "xtensor::xtensor"],
          f"with_blas=False: cpp_info.requires is {r.cpp_info.requires}")
    check("TESSERA_HAS_CBLAS" not in r.cpp_info.defines, "with_blas=False defines TESSERA_HAS_CBLAS")

    # package_info(), with BLAS: as tessera's CMake does when it finds OpenBLAS
    # (CMakeLists.txt: target_compile_definitions TESSERA_HAS_CBLAS, BLAS::BLAS).
    for provided_by, folder in (("a Conan package", "/p/openblas"), ("[platform_requires]", None)):
        r = instance(Recipe, {"with_blas": True}, dependencies={
            "xtensor": Dependency("/p/xtensor"), "xsimd": Dependency("/p/xsimd"),
            "openblas": Dependency(folder)})
        r.package_info()
        what = f"with_blas=True, OpenBLAS from {provided_by}"
        check(r.cpp_info.defines == ["TESSERA_HAS_CBLAS"], f"{what}: defines are {r.cpp_info.defines}")
        check("openblas::openblas" in r.cpp_info.requires,
              f"{what}: cpp_info.requires {r.cpp_info.requires} lacks openblas::openblas")
        check(("openblas" in r.cpp_info.system_libs) == (folder is None),
              f"{what}: system_libs are {r.cpp_info.system_libs}")

    # ---- conan/test_package/conanfile.py ---------------------------------------------
    tp_dir = os.path.join(source_dir, "conan", "test_package")
    TestPackage = load_recipe(os.path.join(tp_dir, "conanfile.py"))
    t = instance(TestPackage)
    t.tested_reference_str = f"tessera/{version}"
    t.requirements()
    check([ref for ref, _ in t.requires_calls] == [t.tested_reference_str],
          f"test_package requires {t.requires_calls}")
    gens = TestPackage.generators
    gens = [gens] if isinstance(gens, str) else list(gens)
    check("CMakeDeps" in gens and "CMakeToolchain" in gens, f"test_package generators are {gens}")
    t.layout()
    t.build()
    check(("cmake.build",) in calls, "test_package build() does not build with CMake")
    t.cpp = types.SimpleNamespace(build=types.SimpleNamespace(bindir="BIN"))
    for blas, arg in ((False, "kernel"), (True, "blas")):
        t.dependencies = Dependencies({"tessera": Dependency("/p/tessera", {"with_blas": blas})})
        t.run_calls = []
        t.test()
        ran = [cmd.split() for cmd, _ in t.run_calls]
        check(len(ran) == 1 and os.path.basename(ran[0][0]) == "test_package" and ran[0][1:] == [arg],
              f"with_blas={blas}: test() runs {t.run_calls}, expected test_package {arg}")
    with open(os.path.join(tp_dir, "CMakeLists.txt")) as f:
        cmake_text = f.read()
    check("add_executable(test_package " in cmake_text,
          "test_package/CMakeLists.txt does not build the executable test() runs (test_package)")
    check("find_package(tessera CONFIG REQUIRED)" in cmake_text and "tessera::tessera" in cmake_text,
          "test_package/CMakeLists.txt does not use find_package(tessera) and tessera::tessera")

    print(f"conan recipes: {checks - len(failures)} of {checks} checks hold")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
