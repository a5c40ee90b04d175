"""conan/test_package: builds test_package.cpp against the tessera package just created
and runs it (Conan 2's test_package convention). ctest builds the same CMake project
against an installed tessera (install test conan_test_package); tools/conan_create.sh runs
the real `conan create`."""

import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class TesseraTestPackageConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            # The argument makes test_package fail unless float products ran on the kernel
            # the option promises: OpenBLAS with with_blas=True, tessera's own without.
            expect = "blas" if self.dependencies["tessera"].options.with_blas else "kernel"
            exe = os.path.join(self.cpp.build.bindir, "test_package")
            self.run(f"{exe} {expect}", env="conanrun")
