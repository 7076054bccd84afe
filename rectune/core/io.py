"""File reading and writing that fails loudly and never leaves half-written outputs."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _current_umask()


class RecTuneError(ValueError):
    """A user error (bad input, bad setting): the scripts print it as one line; anything else is a bug."""


class DataError(RecTuneError):
    """Bad input: the message names the file and, where known, the line and field."""

    def __init__(self, path: str | os.PathLike, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


TEMP_TAG = "rectune"  # in every temporary file's name, so leftovers are told from a user's own .*.tmp files


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` and rename it over ``path`` on success.

    On any exception the temporary file is removed, so readers never see a partial output.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{TEMP_TAG}-{os.getpid()}-", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp's 0600 would make shared outputs unreadable to others
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
        os.replace(tmp, path)
        fault_point(f"wrote:{path.name}")
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)  # a full disk fails a write, which names no file: name the output
        raise


def open_own_file(path: str | os.PathLike, mode: str) -> IO:
    """Open a file RecTune keeps adding to (``"a"``) or reads back (``"rb"``), never through a link: the path
    must be a plain file of this user with no other hard link, or be missing (created, when appending)."""
    path = Path(path)
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # no link followed, no FIFO waited on
    flags |= os.O_WRONLY | os.O_APPEND | os.O_CREAT if "a" in mode else os.O_RDONLY
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise DataError(path, "is not a plain file (a symbolic link?): RecTune did not write it") from None
        raise
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or found.st_uid != os.getuid():
        os.close(descriptor)
        raise DataError(path, "is not a plain file of its own (another file's hard link?): RecTune did not write it")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, mode, encoding=None if "b" in mode else "utf-8")


def fault_point(name: str) -> None:
    """Test hook: the process kills itself here when ``RECTUNE_FAULT`` names this point.

    tests/core/test_faults.py uses it to interrupt runs at chosen moments, as a power cut or an OOM kill would.
    """
    if os.environ.get("RECTUNE_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


_encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(x, ensure_ascii=False), one encoder


def json_line(row: dict) -> str:
    """``row`` as one line of a JSONL file RecTune writes (UTF-8, not ASCII-escaped), its newline included."""
    return _encode(row) + "\n"


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Atomically write ``rows`` as JSON lines; returns the number written."""
    count = 0
    with atomic_write(path) as handle:
        for row in rows:
            handle.write(json_line(row))
            count += 1
    return count


def write_json(path: str | os.PathLike, obj: Any, *, line_per_item: tuple[str, ...] = ()) -> None:
    """Atomically write ``obj`` as indented JSON.

    Top-level lists named in ``line_per_item`` (a report's 30,000 per-query scores, say) get one
    compact item per line: as readable, and written by the C encoder instead of the slow indenting one.
    """
    with atomic_write(path) as handle:
        if not line_per_item or not isinstance(obj, dict):
            json.dump(obj, handle, ensure_ascii=False, indent=2)
            handle.write("\n")
            return
        entries = []
        for key, value in obj.items():
            name = json.dumps(key, ensure_ascii=False)
            if key in line_per_item and isinstance(value, list) and value:
                items = ",\n".join("    " + _encode(item) for item in value)
                entries.append(f"  {name}: [\n{items}\n  ]")
            else:
                text = json.dumps(value, ensure_ascii=False, indent=2).replace("\n", "\n  ")
                entries.append(f"  {name}: {text}")
        handle.write("{\n" + ",\n".join(entries) + "\n}\n")


# A file saved by Windows tools (Notepad, Excel's "CSV UTF-8") starts with one: kept, it would be part of the
# first id ("\ufeff1", a film no rating names) or make the first JSON line malformed
BOM = "\ufeff"


def read_json(path: str | os.PathLike) -> Any:
    require_file(path)
    return parse_json(read_text(path), path)


def read_json_object(path: str | os.PathLike) -> dict:
    """:func:`read_json` of a file that must hold one JSON object (a list or a number there is one line)."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise DataError(path, f"expected a JSON object, got {type(value).__name__}")
    return value


# JSON's \\uD800-\\uDFFF escapes, one half of a UTF-16 pair each: a pair makes one character, a lone half none
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def parse_json(text: str | bytes, path: str | os.PathLike, line: int | None = None) -> Any:
    """``json.loads``, with every failure a :class:`DataError` naming the file and line.

    Python's parser recurses per nesting level: a line of 100,000 ``[`` is malformed input, not a crash. A lone
    half of a UTF-16 pair (``"\\udcff"``: a review's emoji cut in two) is no character, and no UTF-8 file can hold
    it: every record RecTune writes from it failed to encode, a traceback with the report half written. It is read
    as U+FFFD, as a UTF-8 decoder reads a broken byte.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(path, f"malformed JSON: {err.msg}", line=line or err.lineno) from None
    except RecursionError:
        raise DataError(path, "malformed JSON: nested too deeply", line=line) from None
    except ValueError as err:  # an integer past Python's digit limit
        raise DataError(path, f"malformed JSON: {err}", line=line) from None
    searched = text if isinstance(text, str) else text.decode("utf-8", "replace")
    return whole_characters(value) if SURROGATE_ESCAPE.search(searched) else value


def whole_characters(value: Any) -> Any:
    """``value`` (JSON's strings, lists and objects) with each lone surrogate read as U+FFFD; pairs are characters
    already. Iterative: JSON nested just within the parser's limit."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub(REPLACEMENT, value)
    root = [value]
    pending = [(root, 0)]
    while pending:
        holder, key = pending.pop()
        item = holder[key]
        if isinstance(item, str):
            holder[key] = LONE_SURROGATE.sub(REPLACEMENT, item)
        elif isinstance(item, list):
            pending.extend((item, index) for index in range(len(item)))
        elif isinstance(item, dict):
            renamed = {LONE_SURROGATE.sub(REPLACEMENT, name): entry for name, entry in item.items()}
            item.clear()
            item.update(renamed)
            pending.extend((item, name) for name in item)
    return root[0]


# No row, catalog item or answer is near this; a line is read whole before it is parsed, so a file with no line
# break (gigabytes of another kind of file under a .jsonl name) filled memory, and the allocator's refusal was
# blamed on the batch size. Release files are read with the same limit (rectune.data.movielens)
MAX_LINE_BYTES = 64 << 20


def numbered_jsonl(path: str | os.PathLike, *, allow_empty: bool = False) -> list[tuple[int, dict]]:
    """The JSON objects of a JSONL file, each with its line number for error messages.

    Blank lines are skipped; anything else malformed is an error naming the file and line.
    """
    path = Path(path)
    require_file(path)
    rows = []
    with path.open("rb") as handle:
        for line_no, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:  # a file of no line break (another kind of file?) was read whole
                raise DataError(path, f"a line longer than {MAX_LINE_BYTES:,} bytes: no row, item or answer is "
                                "near that (not a JSONL file?)", line=line_no)  # fmt: skip
            try:
                line = raw.decode("utf-8").removeprefix(BOM if line_no == 1 else "")
            except UnicodeDecodeError as err:
                raise DataError(path, f"not UTF-8 text (byte {err.start + 1} of the line)", line=line_no) from None
            if not line.strip():
                continue
            row = parse_json(line, path, line_no)
            if not isinstance(row, dict):
                raise DataError(path, f"expected a JSON object, got {type(row).__name__}", line=line_no)
            rows.append((line_no, row))
    if not rows and not allow_empty:
        raise DataError(path, "file is empty")
    return rows


def require_strings(
    raw: dict, names: tuple[str, ...], path: str | os.PathLike, line: int, *, one_line: bool = False
) -> None:
    """Each of ``names`` must be a non-empty string in ``raw`` (with ``one_line``, free of line breaks and
    other control characters, as titles and ids are); else an error naming file, line and field."""
    for name in names:
        if not isinstance(raw.get(name), str) or not raw[name].strip():
            raise DataError(path, f"field {name!r}: must be a non-empty string", line=line)
        if one_line and (bad := CONTROL.search(raw[name])):
            raise DataError(path, f"field {name!r}: holds a control character ({bad.group()!r})", line=line)


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # line breaks (Unicode's too) and other controls


SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)  # fmt: skip


def check_plain_files(folder: str | os.PathLike) -> None:
    """One line where an entry of ``folder`` is, or links to, a FIFO, a socket or a device: a loader opening it
    would wait for a writer forever (a FIFO, which an archive can carry) or read without end (a link to
    ``/dev/zero``). A folder of a stranger's files is checked before anything reads it; links to plain files
    (the Hugging Face cache's) are fine, and links that lead nowhere are left to the loaders."""
    with os.scandir(folder) as entries:
        for entry in entries:
            problem = _special_file(Path(entry.path))
            if problem:
                raise DataError(entry.path, problem)


def require_file(path: str | os.PathLike, missing: str = "file not found") -> None:
    """One line unless ``path`` is a plain file (or links to one): ``missing`` where nothing is there, else what
    is there instead (a folder, a FIFO, a device)."""
    path = Path(path)
    if path.is_file():
        return
    problem = _folder_given(path) if path.is_dir() else _special_file(path)
    raise DataError(path, problem or missing)


def present_file(path: str | os.PathLike) -> bool:
    """Whether an optional input is there: True for a plain file (or a link to one), False where nothing is, and
    one line for anything else under its name (a folder, a link to nothing or to itself, a FIFO): a release's
    ``ratings.dat`` that is a folder had been warned about as not found, and the benchmark built without it."""
    path = Path(path)
    if path.is_file():
        return True
    if not os.path.lexists(path):
        return False
    require_file(path, _broken_link(path))
    return True


def _broken_link(path: Path) -> str:
    """Why a symbolic link ``path`` that leads to no file reads as nothing."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "is a symbolic link that leads back to itself, not a file"
        return f"is a symbolic link to {os.readlink(path)}, which is not there"
    return "is not a plain file"


def _folder_given(path: Path) -> str:
    """A folder where a file was wanted, with the JSONL files it holds: ``--data data/movie`` meant one of them."""
    held = sorted(entry.name for entry in path.glob("*.jsonl") if entry.is_file())
    shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
    return "is a folder, not a file" + (f" (it holds {shown}: give one)" if held else "")


def _special_file(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file (a FIFO, a socket, a device, or a link to one), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    kind = next((name for test, name in SPECIAL_FILES if test(mode)), None)
    if kind is None:
        return None
    target = f"links to {os.path.realpath(path)}, " if path.is_symlink() else "is "
    return f"{target}{kind}, not a plain file; reading it would wait or never end"


def read_text(path: str | os.PathLike) -> str:
    """Read text that may be UTF-8 (a byte-order mark dropped) or Latin-1 (MovieLens ``.dat`` files exist in both)."""
    return decode_text(Path(path).read_bytes()).removeprefix(BOM)


def decode_text(raw: bytes) -> str:
    """UTF-8, else Latin-1, which decodes any bytes (ml-100k's u.item is Latin-1; older MovieLens and Amazon
    dumps mix the two, line by line)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
