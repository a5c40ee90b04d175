"""Conan 2 recipe for tessera, a header-only C++20 library.

From a checkout of tessera:

    conan create conan --build=missing

packages the headers of the checkout (the recipe sits in conan/, the headers in
../include) and runs conan/test_package. The version below must equal the one in
CMakeLists.txt, include/tessera/version.hpp and the vcpkg manifests; the ctest test
`packaging.versions` checks that they agree.
"""

import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy
from conan.tools.layout import basic_layout
from conan.tools.scm import Version

required_conan_version = ">=2.0"


class TesseraConan(ConanFile):
    name = "tessera"
    version = "0.1.0"
    description = ("JAX's SPMD sharding model in C++20 (header-only): meshes, partition "
                   "specs, sharded arrays, shard_map and collectives over std::thread devices")
    topics = ("sharding", "spmd", "jax", "xtensor", "collectives", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {
        # True: require OpenBLAS and link it, for the cblas_sgemm/cblas_dgemm calls of
        # the local matrix product. False (default): no BLAS in the dependency graph.
        "with_blas": [True, False],
    }
    default_options = {
        "with_blas": False,
        # tessera needs Boost's headers only (Hana); do not build Boost's libraries.
        "boost/*:header_only": True,
    }
    no_copy_source = True

    # The oldest compilers tessera is built and tested with (README: Tested toolchains).
    @property
    def _compilers_minimum_version(self):
        return {"gcc": "12", "clang": "14"}

    def export_sources(self):
        # The recipe lives in conan/; the library is the checkout's include/ folder.
        root = os.path.join(self.recipe_folder, os.pardir)
        copy(self, "*.hpp", src=os.path.join(root, "include"),
             dst=os.path.join(self.export_sources_folder, "include"))
        copy(self, "LICENSE*", src=root, dst=self.export_sources_folder)

    def layout(self):
        basic_layout(self)

    def requirements(self):
        # The versions ConanCenter ships together: its xtensor 0.24.7 requires xsimd
        # 13.0.0. tessera uses only the part of xsimd's API that is the same from 8.x
        # to 13.x, and is tested here with xtensor 0.24.3 and xsimd 8.1.0 and 13.2.0.
        self.requires("xtensor/0.24.7", transitive_headers=True)
        self.requires("xsimd/13.0.0", transitive_headers=True)
        self.requires("boost/1.81.0", transitive_headers=True)
        if self.options.with_blas:
            self.requires("openblas/0.3.27")

    def package_id(self):
        self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)
        minimum = self._compilers_minimum_version.get(str(self.settings.compiler))
        if minimum and Version(self.settings.compiler.version) < minimum:
            raise ConanInvalidConfiguration(
                f"{self.ref} needs C++20 as {self.settings.compiler} {minimum} or newer "
                f"implements it; this profile has {self.settings.compiler} "
                f"{self.settings.compiler.version}")

    def source(self):
        pass  # export_sources() already brought the headers

    def build(self):
        pass  # header-only

    def package(self):
        copy(self, "LICENSE*", src=self.source_folder,
             dst=os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", src=os.path.join(self.source_folder, "include"),
             dst=os.path.join(self.package_folder, "include"))

    def package_info(self):
        # find_package(tessera CONFIG REQUIRED) and the target tessera::tessera, as
        # with tessera's own CMake package.
        self.cpp_info.set_property("cmake_file_name", "tessera")
        self.cpp_info.set_property("cmake_target_name", "tessera::tessera")
        self.cpp_info.set_property("pkg_config_name", "tessera")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
