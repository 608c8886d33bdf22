"""Build step for the one compiled part: the graph view's layout (`workbench/graphs/_layout.c`).

Everything else is declared in pyproject.toml. The extension is optional: without a C compiler
the install still succeeds and `workbench.graphs.layout` runs the same layout in Python (slower), saying
so (`workbench.graphs.layout.LAYOUT_BACKEND`, a warning on first use)."""
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """-ffp-contract=off keeps floating-point results identical to the Python reference
    (no fused multiply-add), on compilers that know the flag."""

    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args += ["-ffp-contract=off"]
        super().build_extensions()


setup(
    ext_modules=[Extension("workbench.graphs._layout", ["workbench/graphs/_layout.c"], optional=True)],
    cmdclass={"build_ext": BuildExt},
)
