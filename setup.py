"""Builds the deepinfer Python package: CMake builds the native module deepinfer._core (target
deepinfer_python_core) and the package gets a copy of the embedded default model.

    pip install --no-build-isolation .      # needs cmake, ninja and the Debian packages of tools/install_deps.sh

The CMake build goes to build-pip/ (a full build of the engine: tens of minutes on 2 cores, minutes
when ccache has build/'s objects); DEEPINFER_BUILD_DIR=DIR reuses an existing CMake build directory
instead (e.g. the one `make python` made).
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL_DIR = os.path.join(ROOT, "models", "deepinfer-tiny-v3")
# The files of a Hugging Face model directory the engine reads (the rest is the model's paperwork).
MODEL_FILE_PATTERNS = ("*.json", "*.safetensors", "README.md")


class CMakeExtension(Extension):
    def __init__(self) -> None:
        super().__init__("deepinfer._core", sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = os.environ.get("DEEPINFER_BUILD_DIR")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
        else:
            # build-pip itself (setuptools' own lib./temp. folders sit beside CMake's files): one level
            # below the checkout, as build/ is, so its relative paths match build/'s where
            # CCACHE_BASEDIR is set and ccache reuses build/'s objects.
            build_dir = os.path.join(ROOT, "build-pip")
            subprocess.check_call(
                [
                    "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DDEEPINFER_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}",
                    "-DBUILD_TESTING=OFF", "-DDEEPINFER_BENCH=OFF", "-DDEEPINFER_FUZZ=OFF",
                ]
            )
        jobs = os.environ.get("DEEPINFER_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs, "--target", "deepinfer_python_core"])
        built = glob.glob(os.path.join(build_dir, "python", "deepinfer", "_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one deepinfer/_core*.so in {build_dir}/python, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


class BuildPyWithDefaultModel(build_py):
    """The package's files plus the embedded default model in deepinfer/models/default, where
    deepinfer.DEFAULT_MODEL looks for it."""

    def run(self) -> None:
        super().run()
        target = os.path.join(self.build_lib, "deepinfer", "models", "default")
        os.makedirs(target, exist_ok=True)
        for pattern in MODEL_FILE_PATTERNS:
            for path in glob.glob(os.path.join(DEFAULT_MODEL_DIR, pattern)):
                shutil.copyfile(path, os.path.join(target, os.path.basename(path)))


setup(
    packages=["deepinfer"],
    package_dir={"": "python"},
    package_data={"deepinfer": ["py.typed", "*.pyi"]},
    ext_modules=[CMakeExtension()],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithDefaultModel},
    options={"build": {"build_base": "build-pip"}},
    zip_safe=False,
)
