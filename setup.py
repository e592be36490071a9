"""One step added to setuptools' build (everything else is in pyproject.toml): the wheel carries
the course. ``build_py`` copies ``notebooks/`` and ``docs/`` -- the files
``placement_edu.course.course_files`` names -- into ``placement_edu/course/content/`` of the build,
where ``placement_edu.course.content_root`` finds them in an installed wheel. The sdist carries the
two folders too (MANIFEST.in), so a wheel built from it has them. An editable install copies
nothing: it reads them from the checkout."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # this source tree's placement_edu (its course module: stdlib only)

from placement_edu.course import PACKAGED, course_files  # noqa: E402


class BuildPyWithCourse(build_py):
    """setuptools' build_py, then the course's files into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        content = Path(self.build_lib) / PACKAGED.relative_to(ROOT)
        shutil.rmtree(content, ignore_errors=True)  # (a build/ kept from an earlier build)
        for name in course_files(ROOT):
            (content / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, content / name)


setup(cmdclass={"build_py": BuildPyWithCourse})
