"""``placement-edu course [DIR]``: the course on this machine. Copies the notebooks and the theory
into DIR (default ./placement-edu-course) and opens the first notebook in JupyterLab, with the
course's server settings (a kernel idle for 10 minutes is shut down). Run it again to come back:
a notebook you edited is kept as it is, and the line printed says where a fresh copy can go.

``--site OUT`` builds the course's website into OUT (open OUT/index.html from disk: it loads
nothing from outside); ``--slides OUT`` writes a reveal.js deck per notebook, and the lecture's.

JupyterLab's token: JUPYTER_TOKEN from the environment when it is set (a server for tests, or a
shared machine); otherwise JupyterLab makes one and prints the URL that carries it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from placement_edu.arguments import command, flag_type
from placement_edu.course import FIRST, SERVER_CONFIG, Copied, copy_course, fresh_folder, require
from placement_edu.errors import expect, read_int

#: Where the course goes when no DIR is given (relative to the folder the command runs in).
DEFAULT_DIR = Path("placement-edu-course")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "course",
        "the course: copy the notebooks, open them in JupyterLab; or build its site, slides",
        __doc__,
    )
    p.add_argument(
        "dir",
        nargs="?",
        type=Path,
        metavar="DIR",
        help=f"where the course is copied and opened (default ./{DEFAULT_DIR})",
    )
    built = p.add_argument_group("build instead of opening the course")
    built.add_argument("--site", type=Path, metavar="OUT", help="build the website into OUT")
    built.add_argument("--slides", type=Path, metavar="OUT", help="write the slide decks to OUT")
    lab = p.add_argument_group(
        "JupyterLab",
        "its token: JUPYTER_TOKEN from the environment when it is set; otherwise JupyterLab makes "
        "one and prints the URL that carries it",
    )
    lab.add_argument(
        "--no-browser", action="store_true", help="start the server without opening a browser"
    )
    lab.add_argument(
        "--port",
        type=flag_type(read_int, "port", 65535, "8888"),
        help="serve on this port, or fail if it is taken (default: 8888 or the next free one)",
    )
    p.set_defaults(handler=_course)


def _course(args: argparse.Namespace) -> int:
    if args.site is None and args.slides is None:
        return _open(args.dir or DEFAULT_DIR, args.port, browser=not args.no_browser)
    expect(
        args.dir is None,
        f"give DIR (to open the course) or --site/--slides (to build), not both; got {args.dir}",
    )
    if args.site is not None:
        _site(args.site)
    if args.slides is not None:
        _slides(args.slides)
    return 0


def kept_line(copied: Copied) -> str:
    """The one line that says which edited files the copy left alone, and where a fresh copy can
    go: "kept your edited 03_sharded.ipynb (and 2 more) in DIR; for a fresh copy: ..."."""
    more = f" (and {len(copied.kept) - 1} more)" if len(copied.kept) > 1 else ""
    return (
        f"kept your edited {Path(copied.kept[0]).name}{more} in {copied.dest}; "
        f"for a fresh copy: placement-edu course {fresh_folder(copied.dest)}"
    )


def lab_command(dest: Path, port: int | None, browser: bool) -> list[str]:
    """JupyterLab on the course in ``dest``, opening ``FIRST`` (run from ``dest``: the server
    looks for the file it opens in its working folder), with the server settings of
    ``SERVER_CONFIG``; ``--allow-root`` where the user is root (a container's usual user), which
    JupyterLab otherwise refuses."""
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--config={SERVER_CONFIG}",
        f"--ServerApp.root_dir={dest.resolve()}",
        *([] if browser else ["--no-browser"]),
        *([] if port is None else [f"--port={port}", "--ServerApp.port_retries=0"]),
        *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        FIRST,
    ]


def _open(dest: Path, port: int | None, browser: bool) -> int:
    """Copy the course into ``dest`` and become JupyterLab on it (``os.execv``: JupyterLab takes
    this process's place, so Ctrl-C and the exit status are its own, and nothing waits behind)."""
    require("jupyterlab", "course")
    copied = copy_course(dest)
    if copied.kept:
        print(kept_line(copied))
    print(f"the course is in {dest}: JupyterLab opens {FIRST} (Ctrl-C stops it)", flush=True)
    command = lab_command(dest, port, browser)
    os.chdir(dest)  # (where JupyterLab finds FIRST)
    os.execv(command[0], command)
    return 0  # (not reached: execv returns only by raising)


def _site(out: Path) -> None:
    require("sphinx", "course --site")
    from placement_edu.course import site

    start = time.perf_counter()
    index = site.build(out)
    print(f"the website: {index} (built in {time.perf_counter() - start:.1f} s)")


def _slides(out: Path) -> None:
    require("nbconvert", "course --slides")
    from placement_edu.course import slides

    decks = slides.build(out)
    folder = Path(os.path.commonpath([deck.parent for deck in decks])) if decks else out
    print(f"{len(decks)} slide decks in {folder}")
