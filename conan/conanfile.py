"""Conan 2 recipe for tessera, a header-only C++20 library.

From a checkout of tessera:

    conan create conan --version 0.1.0 -s compiler.cppstd=20

packages the headers of the checkout (the recipe sits in conan/, the headers in
../include) and runs conan/test_package. tools/conan_create.sh does this twice (with_blas
False and True) in a private Conan home, against the system's xtensor, xsimd and OpenBLAS.
The version below must equal the one in CMakeLists.txt, include/tessera/version.hpp and
the vcpkg manifests; the ctest test `packaging.versions` checks that they agree.
"""

import os
import shutil

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
    license = "BSD-3-Clause"
    description = ("JAX's SPMD sharding model in C++20 (header-only): meshes, partition "
                   "specs, sharded arrays, shard_map and collectives over std::thread devices")
    topics = ("sharding", "spmd", "jax", "xtensor", "collectives", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {
        # True: require OpenBLAS, link it and define TESSERA_HAS_CBLAS for consumers, so that
        # float/double local matrix products call cblas_sgemm/cblas_dgemm, as tessera's own
        # CMake package does when it finds OpenBLAS. False (default): tessera's xsimd kernel,
        # no BLAS in the dependency graph.
        "with_blas": [True, False],
        # True: require HDF5 for tessera/checkpoint.hpp (checkpoints, tessera::hdf5 in tessera's
        # own CMake package); across processes it must be a parallel HDF5 (the hdf5 recipe's
        # option parallel=True, with an MPI). False (default): no HDF5 in the dependency graph;
        # everything but tessera/checkpoint.hpp works.
        "with_hdf5": [True, False],
    }
    default_options = {
        "with_blas": False,
        "with_hdf5": False,
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
        # Not copy(): it would walk the whole checkout, build trees included, for one file.
        shutil.copy2(os.path.join(root, "LICENSE"), self.export_sources_folder)

    def layout(self):
        basic_layout(self)

    def requirements(self):
        # The ranges tessera supports (docs/installation.md, "Versions"); the same ones are
        # in CMake's find_package and in tessera.pc. Ranges rather than pins let a profile's
        # [platform_requires] name the system's versions (tools/conan_create.sh) and let
        # ConanCenter's xtensor pick the xsimd it was released with.
        self.requires("xtensor/[>=0.24 <0.28]", transitive_headers=True)
        self.requires("xsimd/[>=8 <15]", transitive_headers=True)
        if self.options.with_blas:
            # tessera declares cblas_sgemm/cblas_dgemm itself (runtime/gemm.hpp) and never
            # includes cblas.h, so consumers need OpenBLAS's library, not its headers.
            self.requires("openblas/[>=0.3 <1]", transitive_libs=True)
        if self.options.with_hdf5:
            # tessera/checkpoint.hpp includes <hdf5.h> and calls its C API.
            self.requires("hdf5/[>=1.10 <2]", transitive_headers=True, transitive_libs=True)

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
        copy(self, "LICENSE", src=self.source_folder,
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
        self.cpp_info.requires = ["xtensor::xtensor", "xsimd::xsimd"]
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
        if self.options.with_hdf5:
            self.cpp_info.requires.append("hdf5::hdf5")
        if self.options.with_blas:
            # What tessera's CMake gives tessera::tessera when it finds OpenBLAS: the
            # macro that routes float/double products to cblas_sgemm/cblas_dgemm, and BLAS.
            self.cpp_info.defines = ["TESSERA_HAS_CBLAS"]
            self.cpp_info.requires.append("openblas::openblas")
            # A profile's [platform_requires] can say the system provides OpenBLAS: Conan then
            # has no package, and so no link flags, for it, and self.dependencies["openblas"]
            # hides it (items() does not). Without -lopenblas the consumer would fail to link
            # cblas_sgemm, so name the system library.
            openblas = [dep for req, dep in self.dependencies.items() if req.ref.name == "openblas"]
            if not openblas or all(dep.package_folder is None for dep in openblas):
                self.cpp_info.system_libs.append("openblas")
