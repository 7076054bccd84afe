"""How every entry script ends: user errors as one line and exit status 2, bugs as tracebacks.

User errors are :class:`~rectune.core.io.RecTuneError` (bad input, bad setting, a refused output
folder) and the operating system's refusals that name a file (disk full, permission denied,
no such file): neither is a bug, so neither gets a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import logging
import os
import re
import resource
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from rectune.core.closed_pipes import tolerate_gone_readers
from rectune.core.escaping import terminal_text
from rectune.core.folder_hints import folder_hint
from rectune.core.gc_pause import tune_collection_for_a_run
from rectune.core.io import RecTuneError
from rectune.core.kept_inputs import refuse_outputs_over_inputs
from rectune.core.outputs import disk_full

USER_ERROR = 2  # argparse's status for a bad command line; ours for every user error
_OS_USER_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.ENOENT, errno.EROFS, errno.ENOTDIR,
                   errno.ENAMETOOLONG}  # fmt: skip


def run(main: Callable[[], object]) -> None:
    """Call ``main``; a user error prints ``error: ...`` on stderr and exits with status 2. A SIGTERM (``kill``,
    a scheduler's time limit) exits with status 143 through the ``with`` blocks, so staged outputs and the
    on-disk rating store are removed as on any other failure."""
    tune_collection_for_a_run()  # the libraries loaded so far are not walked again: ~1 s less a run
    signal.signal(signal.SIGTERM, _terminated)
    tolerate_gone_readers()  # `| head`: the run goes on where a print had raised BrokenPipeError
    logging.setLogRecordFactory(_TerminalRecord)
    warnings.showwarning = _terminal_warning
    try:
        main()
    except RecTuneError as err:
        _fail(str(err))
    except OSError as err:
        if err.errno not in _OS_USER_ERRORS:
            raise
        # a copy names its source first and the file it writes second (shutil's): a full disk is the second's
        named = err.filename2 if disk_full(err) and err.filename2 else err.filename
        where = f": {named}" if named else ""
        _fail(f"{err.strerror or err}{where}{folder_hint(err)}")
    except KeyboardInterrupt:
        sys.exit(130)
    except (RuntimeError, MemoryError) as err:  # torch.OutOfMemoryError is a RuntimeError, NumPy's a MemoryError
        problem = out_of_memory(err)
        if problem is None:
            raise
        _fail(
            f"out of memory: {problem}; smaller batches, sequences or samples need less (training: "
            "per_device_train_batch_size with more gradient_accumulation_steps, max_length or max_completion_length, "
            "num_generations, gradient_checkpointing; evaluation: --batch-size; compare.py: --bootstrap-samples)"
        )
    except Exception as err:  # a library's own error for a full disk: DuckDB's IOException (the rating store)
        if not disk_full(err):
            raise
        _fail(f"{err}{folder_hint(err)}")
    except BaseException as err:  # noqa: BLE001 (a Rust library's panic is a BaseException, not an Exception)
        if type(err).__name__ != "PanicException":
            raise
        _fail(_native_failure(str(err)))


def _native_failure(message: str) -> str:
    """A panic of the Rust libraries under transformers, as one line. The one a stranger's files cause:
    ``tokenizers`` matches a tokenizer.json's Split and Replace patterns with Oniguruma, which gives up after ten
    million backtracking steps at one place in the text, and the library panics."""
    if "retry-limit-in-match" in message:
        return (
            f"the model's tokenizer gave up on a text ({message}): a Split or Replace pattern in its tokenizer.json "
            "that backtracks without end? Use the tokenizer of the model it was trained from"
        )
    return f"a library's native code stopped ({message})"


def out_of_memory(err: Exception) -> str | None:
    """What torch or NumPy said when an allocation failed (a GPU's ``OutOfMemoryError``, the CPU allocator's
    refusal, NumPy's ``MemoryError``), in its first sentences, or None for any other error. A batch too large for
    the device is a setting, not a bug: its traceback through TRL and transformers named no setting."""
    text = " ".join(str(err).split())
    if isinstance(err, MemoryError):
        return text or "an allocation failed"
    if type(err).__name__ == "OutOfMemoryError":
        return " ".join(re.split(r"(?<=\.) ", text)[:3])  # what was asked, the capacity, what is free
    refused = re.search(r"can't allocate memory: you tried to allocate (\d+) bytes", text)
    if refused is None:
        return None
    return f"the CPU could not allocate {int(refused[1]) / 2**30:,.1f} GiB more"


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _fail(message: str) -> None:
    tqdm = sys.modules.get("tqdm")
    if tqdm is not None:  # a bar left open (training stopped mid-step) would redraw itself after the error
        # the innermost first (an evaluation's, under the training bar): closing one below moves the cursor back up,
        # which, after the outer bar had ended its line, put the error over that line
        for bar in sorted(getattr(tqdm.tqdm, "_instances", ()), key=lambda bar: -abs(getattr(bar, "pos", 0))):
            bar.close()
    # one line, whatever the message held: it may quote a server, a model folder or a data file
    print(f"error: {terminal_text(' '.join(message.split()))}", file=sys.stderr)
    sys.exit(USER_ERROR)


class _TerminalRecord(logging.LogRecord):
    """A log record whose message is safe to print (:func:`terminal_text`): warnings quote model folders,
    servers and data files, and every handler, a library's own included, prints what this returns."""

    def getMessage(self) -> str:  # noqa: N802 (logging's name)
        return terminal_text(super().getMessage())


_show_warning = warnings.showwarning


def _terminal_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python's warnings, with their message safe to print: they quote strangers too (matplotlib names the glyphs
    a chart's label lacks, an escape character among them)."""
    _show_warning(terminal_text(message), category, filename, lineno, file, line)


def fraction(text: str) -> float:
    """argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text}")
    return value


def share(text: str) -> float:
    """argparse type: a share kept, above 0 and at most 1 (a merge's density: 0 keeps no delta at all)."""
    value = finite(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number above 0 and at most 1, got {text}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (a count of queries, candidates, titles)."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: a whole number of at least 0 (where 0 means none: history items asked of a user, profiled
    steps)."""
    return _whole_number(text, 0)


# The longest recommendation list RecTune asks for or scores (the papers ask for 5 to 20 titles): a K of 10**12
# made the authors' evaluator pad every answer to K titles (a MemoryError, said to be the batch's) and Rank-GRPO's
# advantages hold K values a completion
K_MAX = 1000


def list_length(text: str) -> int:
    """argparse type: a recommendation list's length K, a whole number in [1, :data:`K_MAX`]."""
    value = _whole_number(text, 1)
    if value > K_MAX:
        raise argparse.ArgumentTypeError(f"expected a list of at most {K_MAX} items, got {value}")
    return value


SEED_MAX = 2**32 - 1  # NumPy's largest; torch's manual_seed overflowed past 2**63


def seed(text: str) -> int:
    """argparse type: a seed torch and NumPy both take, a whole number in [0, :data:`SEED_MAX`]."""
    value = _whole_number(text, 0)
    if value > SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected a seed of at most {SEED_MAX}, got {value}")
    return value


def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a number of at least {least}, got {value}")
    return value


def non_negative(text: str) -> float:
    """argparse type: a finite number of at least 0 (a rating gap)."""
    value = finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of at least 0, got {text}")
    return value


def percent(text: str) -> float:
    """argparse type: a number in [0, 100] (a RapidFuzz ratio)."""
    value = finite(text)
    if not 0.0 <= value <= 100.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 100, got {text}")
    return value


def finite(text: str) -> float:
    """argparse type: a finite number (no nan or inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
    return value


def positive(text: str) -> float:
    """argparse type: a finite number above 0 (a sampling temperature, a timeout)."""
    value = finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    return value


def file_name(text: str) -> str:
    """argparse type: the name of a file to write (a report, or a prefix for a table's files). A name ending in
    a separator names a folder, and ``pathlib`` would drop the separator and write a file of the folder's name."""
    if not text.strip() or text.endswith(("/", os.sep)) or Path(text).name in ("", ".", ".."):
        found = f"{text!r}, a folder" if text.strip() else "none"
        raise argparse.ArgumentTypeError(f"expected a file's name, got {found}")
    return text


def check_utf8_arguments(args: Sequence[str]) -> None:
    """Refuse, in one line, a command-line argument whose bytes are no UTF-8 (a folder copied from a Latin-1
    system: Linux takes any bytes in a name). Python hands such bytes on as lone surrogates, which every JSON
    record, report and card RecTune writes the path into refuses to encode: a traceback after the work was done."""
    for arg in args:
        if isinstance(arg, str) and any("\udc80" <= char <= "\udcff" for char in arg):
            raise RecTuneError(
                f"{os.fsencode(arg).decode('utf-8', 'backslashreplace')}: holds bytes that are no UTF-8; RecTune "
                "writes the paths it is given into its records (JSON, Markdown): rename it"
            )


def expand_home(args: Sequence[str]) -> list[str]:
    """The arguments with a leading ``~/`` expanded as the shell would, in ``--flag=~/x`` too, where bash leaves it
    (and in a quoted ``"~/x"``): read as a name, ``--out=~/x`` made a folder called ``~`` in the current one (which
    ``rm -rf ~`` would then remove with the home folder), and ``--data=~/x`` was a file "not found"."""
    expanded = []
    for arg in args:
        flag, equals, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        expanded.append(flag + equals + home_path(value))
    return expanded


def home_path(value: str) -> str:
    """``value`` with a leading ``~/`` expanded as the shell would (a lone ``~`` stays: a stop string, say)."""
    return os.path.expanduser(value) if value.startswith("~/") else value


class ArgumentParser(argparse.ArgumentParser):
    """argparse as every entry script uses it: no prefix matching (``--baselin`` is not ``--baseline``), a
    raw description (the scripts' docstrings keep their line breaks), and an unknown flag answered with
    the closest known one."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(allow_abbrev=False, **kwargs)

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, its arguments UTF-8 (:func:`check_utf8_arguments`), then an output folder
        (:func:`add_output_arguments`) checked against every other path given: a folder built whole and swapped in
        must not be, hold or lie in what the run reads."""
        args = expand_home(sys.argv[1:] if args is None else args)
        check_utf8_arguments(args)
        parsed, extra = super().parse_known_args(args, namespace)
        outputs = getattr(self, "rectune_outputs", ())
        if outputs:
            flag = {a.dest: (a.option_strings or [a.dest])[0] for a in self._actions}  # a positional: its name
            given = [(flag[dest], value) for dest in flag if dest not in outputs
                     for value in _strings(getattr(parsed, dest, None))]  # fmt: skip
            refuse_outputs_over_inputs([(flag[dest], getattr(parsed, dest, None)) for dest in outputs], given)
        return parsed, extra

    def error(self, message: str) -> None:
        unknown = [w for w in message.removeprefix("unrecognized arguments: ").split() if w.startswith("--")]
        if message.startswith("unrecognized arguments") and unknown:
            known = [option for action in self._actions for option in action.option_strings]
            close = difflib.get_close_matches(unknown[0].split("=")[0], known, n=1)
            if close:
                message += f"; did you mean {close[0]}?"
        super().error(message)


def add_output_arguments(parser: argparse.ArgumentParser, help: str = "output folder", also: str | None = None) -> None:
    """``--out`` and ``--overwrite``: a folder RecTune builds whole and swaps in (see docs/guarantees.md). Every
    other path the command line names is read, so ``--out`` (and ``also``, another output flag's dest) may not
    be one, hold one or lie in one, ``--overwrite`` or not."""
    parser.rectune_outputs = ("out", also) if also else ("out",)
    parser.add_argument("--out", required=True, help=help)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out even if it holds files RecTune did not write there (default: refuse)",
    )


def _strings(value: object) -> list[str]:
    """The strings of an option's value (one, or a list of them): the candidates for paths it names."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, str)]


def build_summary(out: str | os.PathLike) -> str:
    """The line a data_prep script ends with: wall and CPU time since the process started, peak resident
    memory, and the bytes of the folder it wrote."""
    written = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.time() - _STARTED
    cpu = usage.ru_utime + usage.ru_stime
    peak_mb = usage.ru_maxrss / 1024  # Linux reports kilobytes
    return f"done in {wall:.1f} s ({cpu:.1f} CPU-s), peak {peak_mb:.0f} MB resident, {written / 1e6:.1f} MB written"


_STARTED = time.time()  # when this module was first imported: the scripts import it at start-up
