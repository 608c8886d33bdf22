"""The `workbench` command: every notebook capability, scriptable for CI/CD.

Each verb lives in its own module `workbench/cli/cmd_<verb>.py` exposing `NAME`, `HELP`,
`add_arguments(parser)` and `run(args) -> int`; they are discovered here, so adding a verb
touches no shared file. Conventions: JSON to stdout with --json; exit 0 fine, 1 the check found
a problem (unsupported, not equivalent, ...), 2 bad input or usage with a one-line message on
stderr and no traceback.

The model comes first: a verb that takes model files also exposes `model_paths(args)`, a list
of (path, "onnx" | "engine") pairs (None paths skipped). Before a missing or invalid option is
reported, and before the verb runs, each is checked (`common.check_model_file`: missing, a
folder, unreadable, empty, not ONNX at all) and a bad one is the error, naming the file.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, List, Optional

from workbench.core.errors import WorkbenchError

if TYPE_CHECKING:  # pragma: no cover
    import argparse

EXIT_OK, EXIT_PROBLEM, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
_parser_cls: Any = None


class _UsageError(SystemExit):
    """argparse's exit 2, carrying the one line it printed (for --json's error object)."""

    def __init__(self, line: str) -> None:
        super().__init__(EXIT_BAD_INPUT)
        self.line = line


def _json_error(verb: Optional[str], code: int, line: str,
                err: Optional[WorkbenchError] = None, model: Optional[str] = None) -> None:
    """With --json, a failure still prints one JSON object on stdout: ok false, the exit
    code and the same one line as stderr (plus file/node/field/hint when known)."""
    import json

    out = {"ok": False, "verb": verb, "exit_code": code, "message": line}
    if err is not None:
        out.update({k: v for k, v in err.to_dict().items() if k != "error"})
        if out.get("next_steps"):
            from workbench.core.nextstep import json_steps

            out = json_steps(out, model=model)
    try:
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # (stdout gone: stderr has the line)
        pass


def _parser_class() -> Any:
    """argparse.ArgumentParser that errors in one line with exit 2 (argparse is imported here,
    after a verb that wants its TensorRT worker early has started it)."""
    global _parser_cls
    if _parser_cls is None:
        import argparse

        class _Parser(argparse.ArgumentParser):
            quiet = False  # main() prints the line itself, after checking the model

            def error(self, message: str) -> None:  # type: ignore[override]
                line = f"{self.prog}: error: {message} (see '{self.prog} --help')"
                if not self.quiet:
                    sys.stderr.write(line + "\n")
                raise _UsageError(line)

        _parser_cls = _Parser
    return _parser_cls


def _verbs(only: Optional[str] = None) -> list:
    """The verb modules; with `only`, just that verb's module when it exists (a CLI call then
    imports one verb, not all of them: start-up time matters in CI/CD loops)."""
    here = os.path.dirname(os.path.abspath(__file__))  # (pkgutil would import inspect: 5 ms)
    names = sorted(f[:-3] for f in os.listdir(here) if f.startswith("cmd_") and f.endswith(".py"))
    if only is not None:
        want = "cmd_" + only.replace("-", "_")
        if want in names:
            names = [want]
    return [importlib.import_module(f"workbench.cli.{n}") for n in names]


def build_parser(verb: Optional[str] = None, mods: Optional[list] = None
                 ) -> "argparse.ArgumentParser":
    from workbench.core.version import __version__

    parser_cls = _parser_class()
    parser = parser_cls(prog="workbench", description="Turn ONNX models into fast, correct "
                        "TensorRT engines: inspect, check, fix, precision, build, timing.")
    parser.add_argument("--version", action="version", version=f"trt-workbench {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=parser_cls)
    # name -> its parser, for errors
    parser.verb_parsers = {}  # type: ignore[attr-defined]
    for mod in (mods if mods is not None else _verbs(verb)):
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
        parser.verb_parsers[mod.NAME] = p  # type: ignore[attr-defined]
    return parser


def _unknown_arguments(parser: "argparse.ArgumentParser", verb: Optional[str],
                       extra: List[str]) -> None:
    """Refuse arguments the verb does not know, naming the verb (its parser reports it, so the
    message reads `workbench build: error: ...`) and the nearest option of that verb."""
    import difflib

    target = getattr(parser, "verb_parsers", {}).get(verb) or parser
    known = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
    msg = "unrecognized arguments: " + " ".join(extra)
    for arg in extra:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], known, n=1, cutoff=0.6)
            if close:
                msg += f" (did you mean {close[0]}?)"
                break
    target.error(msg)


def _user_error(e: BaseException, label: Optional[str] = None) -> Optional[WorkbenchError]:
    """The WorkbenchError an exception stands for when the user's input caused it: a model
    onnxruntime refuses to load or to run on the given inputs (named, with the next step);
    None for our own bugs. `label`: the verb's model path, for messages that name none."""
    if "workbench.runtime.runners" not in sys.modules:  # (onnxruntime never ran)
        return None
    from workbench.runtime.runners import user_error

    return user_error(e, label)


def _first_model(mods: list, args: Any) -> Optional[str]:
    """The first model path the verb was given (its `model_paths`), or None."""
    mod = next((m for m in mods if getattr(m, "NAME", None) == getattr(args, "verb", None)),
               None)
    try:
        paths = [p for p, _ in getattr(mod, "model_paths", lambda a: [])(args) if p]
    except Exception:  # (a verb whose arguments name no model)
        return None
    return str(paths[0]) if paths else None


def _model_arg(args: Any) -> Optional[str]:
    """The model path the user typed (what a next step's {model} becomes): `model`,
    compare's `reference`, or the first of `models`."""
    for name in ("model", "reference", "models"):
        v = getattr(args, name, None)
        v = v[0] if isinstance(v, list) and v else v
        if isinstance(v, str):
            return v
    return None


def _report(verb: Optional[str], e: WorkbenchError, want_json: bool,
            args: Any = None) -> int:
    """A WorkbenchError as the CLI reports it: one line on stderr, then its next steps as
    commands that run when pasted (and the JSON object)."""
    line = f"workbench {verb}: error: {e.one_line()}"
    model = _model_arg(args)
    if getattr(e, "next_steps", None):  # (still one line: the commands in backticks)
        from workbench.core.nextstep import inline

        line += " " + inline(e.next_steps, model=model)
    sys.stderr.write(line + "\n")
    if want_json:
        _json_error(verb, EXIT_BAD_INPUT, line, e, model)
    return EXIT_BAD_INPUT


def _bad_model(parser: "argparse.ArgumentParser", mods: list, verb: Optional[str],
               argv: List[str], args: Any) -> Optional[WorkbenchError]:
    """The error of the first unusable model file the verb was given (its `model_paths`),
    else None. `args`: the parsed arguments; None after a usage error, when the arguments
    are read again leniently (no required options, choices or types) to find the model."""
    mod = next((m for m in mods if getattr(m, "NAME", None) == verb), None)
    paths_of = getattr(mod, "model_paths", None)
    if paths_of is None:
        return None
    from workbench.cli.common import check_model_file

    if args is None:
        sub = getattr(parser, "verb_parsers", {}).get(verb)
        args = _lenient_parse(sub, argv[1:]) if sub is not None else None
        if args is None:
            return None
        unsure = _after_unknown_option(sub, argv[1:])
        paths = [(p, k) for p, k in paths_of(args) if p and p not in unsure]
    else:
        paths = [(p, k) for p, k in paths_of(args) if p]
    for path, kind in paths:
        try:
            check_model_file(path, kind)
        except WorkbenchError as e:
            return e
    what = getattr(mod, "needs_weights", lambda a: None)(args) if args is not None else None
    if what:  # before any work: a model whose weights no runtime reads, in one line
        from workbench.core.model import open_model

        for path, kind in paths:
            if kind != "onnx":
                continue
            try:
                open_model(path).require_weights(what)
            except WorkbenchError as e:
                return e
    return None


def _lenient_parse(sub: "argparse.ArgumentParser", argv: List[str]) -> Any:
    """`argv` parsed by the verb's parser with every option optional, free of choices and
    types, a value optional: where the model argument lands despite the usage error (None
    when even that fails). The parser is put back as it was."""
    saved = []
    for a in sub._actions:
        saved.append((a, a.required, a.choices, a.type, a.nargs))
        if a.option_strings:
            a.required, a.choices, a.type = False, None, None
            if a.nargs is None:
                a.nargs = "?"
            elif a.nargs == "+":
                a.nargs = "*"
        else:
            a.choices, a.type = None, None
    quiet, sub.quiet = getattr(sub, "quiet", False), True  # type: ignore[attr-defined]
    try:
        args, _ = sub.parse_known_args([a for a in argv if a not in ("-h", "--help")])
        return args
    except SystemExit:  # (_UsageError)
        return None
    finally:
        sub.quiet = quiet  # type: ignore[attr-defined]
        for a, required, choices, type_, nargs in saved:
            a.required, a.choices, a.type, a.nargs = required, choices, type_, nargs


def _after_unknown_option(sub: "argparse.ArgumentParser", argv: List[str]) -> set:
    """Arguments right after an option the verb does not know: maybe that option's value,
    not the model (`compare m.onnx --tto fp16`: 'fp16' is no candidate model to check)."""
    known = {o for a in sub._actions for o in a.option_strings}
    return {argv[i + 1] for i, a in enumerate(argv[:-1])
            if a.startswith("-") and len(a) > 1 and "=" not in a and a not in known}


def verb_of(argv: List[str]) -> Optional[str]:
    """The verb of `workbench VERB ...` (the first argument, not an option), else None."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = verb_of(argv)
    mods = _verbs(verb)
    if verb is not None and len(mods) == 1 and hasattr(mods[0], "start_early"):
        # a verb that needs TensorRT starts its worker before argparse is even imported:
        # the worker's TensorRT import then overlaps all of this process's own start-up
        mods[0].start_early(argv[1:])
    parser = build_parser(verb, mods)
    want_json = "--json" in argv
    usage: Optional[_UsageError] = None
    args: Any = None
    for p in (parser, *parser.verb_parsers.values()):  # type: ignore[attr-defined]
        p.quiet = True  # a usage error waits until the model is known to be usable
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            _unknown_arguments(parser, getattr(args, "verb", None), extra)
    except _UsageError as e:
        usage = e
    if usage is not None:
        try:
            bad = _bad_model(parser, mods, verb, argv, None)
        except Exception:  # (a bug of ours here must not hide the usage error behind it)
            if os.environ.get("WORKBENCH_DEBUG"):
                raise
            bad = None
        if bad is not None:  # the model itself is unusable: say that, not what options lack
            return _report(verb, bad, want_json)
        sys.stderr.write(usage.line + "\n")
        if want_json:
            _json_error(verb, EXIT_BAD_INPUT, usage.line)
        raise usage
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    want_json = bool(getattr(args, "json", False))
    try:
        bad = _bad_model(parser, mods, args.verb, argv, args)
        if bad is not None:
            return _report(args.verb, bad, want_json)
        return int(args._run(args) or 0)
    except WorkbenchError as e:
        return _report(args.verb, e, want_json, args)
    except KeyboardInterrupt:
        sys.stderr.write(f"workbench {args.verb}: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug of ours: still one line, with a way to see more
        user = _user_error(e, _first_model(mods, args))
        if user is not None and user.category == "inputs" and \
                getattr(args, "allow_random", False) and not getattr(args, "inputs", None):
            user.hint = ((user.hint + "; ") if user.hint else "") + (
                "the inputs were made up (--allow-random): values such as a shape or an index "
                "may mean nothing to the model, pass real ones with --inputs PATH")
        if user is not None:  # (a model onnxruntime refuses, met where nobody explained it)
            return _report(args.verb, user, want_json, args)
        if os.environ.get("WORKBENCH_DEBUG"):
            raise
        msg = " ".join(f"{type(e).__name__}: {e}".split())[:500]
        line = (f"workbench {args.verb}: internal error: {msg} "
                "(re-run with WORKBENCH_DEBUG=1 for a traceback, and please report it)")
        sys.stderr.write(line + "\n")
        if want_json:
            _json_error(args.verb, EXIT_INTERNAL, line)
        return EXIT_INTERNAL


def run() -> None:
    """The console script: main(), then let a worker this process started go at once. A verb
    that runs onnxruntime (RUNS_ONNXRUNTIME) runs in a forked worker with onnxruntime
    in-process, this process watching it (`workbench.cli.supervise`)."""
    _one_blas_thread()
    argv = sys.argv[1:]
    first = verb_of(argv)
    rc: Optional[int] = None
    if first is not None:
        mods = _verbs(first)
        if len(mods) == 1 and getattr(mods[0], "RUNS_ONNXRUNTIME", False):
            from workbench.cli import supervise

            if supervise.wanted(argv):
                rewind = supervise.option_values(argv, getattr(mods[0], "REWIND_OPTIONS", ()))
                rc = supervise.run_forked(first, lambda: _exit(_main_released(argv), force=True),
                                          rewind)
    if rc is None:
        rc = _main_released(argv, catch_exit=False)
    _exit(rc)


def _one_blas_thread() -> None:
    """numpy's OpenBLAS starts a thread per core when numpy is imported, and they spin a while
    (~0.08 s of a core at every start of the command). The command's numpy work is elementwise
    passes and single-threaded dot pieces (`workbench.runtime.comparison`; onnxruntime and TensorRT
    have thread pools of their own), so it asks for one BLAS thread unless the user set a
    count. Only the console script does this: a notebook's numpy is the user's."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _main_released(argv: List[str], catch_exit: bool = True) -> int:
    """main(argv), then the TensorRT worker this process started (if any) is let go at once.
    catch_exit: a SystemExit (argparse's usage errors) becomes its exit code."""
    try:
        return main(argv)
    except SystemExit as e:
        if not catch_exit:
            raise
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        sys.stderr.write(f"{e.code}\n")
        return 1
    finally:
        client = sys.modules.get("workbench.worker.client")  # (only if this run used one)
        if client is not None:
            client.release_default_client()


def _exit(rc: int, force: bool = False) -> None:
    """Leave without the interpreter's teardown: freeing every module's objects (numpy, onnx's
    protobufs) took ~40 ms of a 1 s `compare` to give back memory the OS takes back anyway.
    What a normal exit does first still happens: threads that are not daemons are waited for
    (threading's shutdown hooks run), then the atexit handlers, then both streams are flushed.
    The normal exit where threading has no shutdown hook, or with $WORKBENCH_DEBUG unless
    `force` (a forked worker must end here)."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None or not hasattr(atexit, "_run_exitfuncs") or \
            (os.environ.get("WORKBENCH_DEBUG") and not force):
        import gc

        gc.freeze()  # (the last full collection would walk every object of every module)
        sys.exit(rc)
    from workbench.cli.common import flush_streams

    shutdown()
    atexit._run_exitfuncs()
    if not flush_streams():  # output lost (a full disk): as CPython's own exit
        rc = rc or 120
    os._exit(rc)
