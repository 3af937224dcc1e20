"""CSV files as columnar batches, with bad rows quarantined instead of crashing the stage.

A record is one physical line: a quoted field may hold delimiters and doubled quotes (`""`) but
not a line break. The file is read in chunks cut at line breaks and each chunk is split by
pyarrow's CSV parser in C++ (every column read as raw bytes, so a non-UTF-8 byte cannot abort
the file); rows with the wrong number of fields arrive through `invalid_row_handler`.

pyarrow itself lets a quoted field run across lines, so one unterminated quote would swallow
every following line into a single bad "row". We detect that at no cost on clean data: a chunk
whose parsed rows (valid + invalid) number fewer than its lines, or whose last line holds a
quote, is checked line by line; lines that leave a quoted field open are quarantined
(`unterminated_quote`) and the rest of the chunk is parsed again, so parsing re-syncs at the
next line.

The values of each batch are typed and checked in sources.csv_values (`infer_types`,
`decode_batch`); this module is the framing: files, header, line breaks, quotes, quarantine.
"""

from __future__ import annotations

import csv
import glob as globlib
import json
import re
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import StageError

BOM = b"\xef\xbb\xbf"
HEAD_BYTES = 1 << 20  # the header line must end within the first MiB
# Leading bytes of files that are not CSV text: refused with a message instead of a traceback.
NOT_TEXT = {
    b"\x1f\x8b": "gzip-compressed (decompress it first)",
    b"PK\x03\x04": "a zip archive (extract it first)",
    b"BZh": "bzip2-compressed (decompress it first)",
    b"\xfd7zXZ\x00": "xz-compressed (decompress it first)",
    b"\x28\xb5\x2f\xfd": "zstd-compressed (decompress it first)",
    b"PAR1": "a Parquet file",
    b"ARROW1": "an Arrow file",
    b"\xff\xfe": "UTF-16 text (save it as UTF-8)",
    b"\xfe\xff": "UTF-16 text (save it as UTF-8)",
}
# One field as pyarrow's parser reads it (quote_char '"', double_quote, no escape char): a
# quote opens a quoted field only at the start of a field, `""` inside it is a literal quote,
# and after the closing quote the field goes on unquoted up to the next delimiter. A line is
# "closed" when it is a sequence of such fields, i.e. no quoted field is left open at its end.
_QUOTED = rb'"(?:[^"\r\n]|"")*"(?:[^",\r\n][^,\r\n]*)?'
_PLAIN = rb'(?:[^",\r\n][^,\r\n]*)?'
_CLOSED_LINE = re.compile(rb"(?:%s|%s)(?:,(?:%s|%s))*" % (_QUOTED, _PLAIN, _QUOTED, _PLAIN))
_CLOSED_LINE_RE2 = "^(?:%s|%s)(?:,(?:%s|%s))*\\r?$" % (
    (_QUOTED.decode(), _PLAIN.decode()) * 2)  # the same, for RE2 on lines split at \n
UNTERMINATED = "a quoted field is not closed on its line (unterminated quote)"


def expand_glob(pattern: str, base: Path | None) -> list[Path]:
    """Files matching `pattern` (relative to `base`), sorted; [] when nothing matches."""
    p = Path(pattern).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return sorted(Path(f) for f in globlib.glob(str(p), recursive=True) if Path(f).is_file())


class Quarantine:
    """Rejected rows: counted by reason, the first `keep` written to `rows.jsonl` with the text."""

    def __init__(self, directory: Path, keep: int = 10_000) -> None:
        self.directory = directory
        self.count = 0
        self.by_reason: dict[str, int] = {}
        self._keep = keep
        self._fh: Any = None
        self.examples: list[str] = []

    def add(self, file: str, reason: str, text: str, kind: str, line: int | None = None) -> None:
        self.count += 1
        self.by_reason[kind] = self.by_reason.get(kind, 0) + 1
        if len(self.examples) < 3:
            where = f" line {line}" if line is not None else ""
            self.examples.append(f"{Path(file).name}{where}: {reason}")
        if self.count > self._keep:
            return
        if self._fh is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.directory / "rows.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        record: dict[str, Any] = {"file": file, "reason": reason, "text": text[:2000]}
        if line is not None:
            record["line"] = line
        self._fh.write(json.dumps(record) + "\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def read_header(path: Path) -> list[str] | None:
    """The header fields of a CSV file, or None for an empty file.

    A UTF-8 byte order mark is skipped. A file that is not CSV text (compressed, binary,
    UTF-16) or whose header line is not UTF-8 or cannot be parsed is a StageError naming it.
    """
    return _read_head(path)[0]


def _read_head(path: Path) -> tuple[list[str] | None, int]:
    """(header fields or None for an empty file, byte offset of the first row)."""
    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
    for magic, what in NOT_TEXT.items():
        if head.startswith(magic):
            raise StageError(f"CSV file {path} is not CSV text: it is {what}")
    start = len(BOM) if head.startswith(BOM) else 0
    brk = re.compile(rb"\r\n|\n|\r").search(head, start)
    if brk is None and len(head) == HEAD_BYTES:
        raise StageError(f"CSV file {path}: no line break in its first {HEAD_BYTES >> 20} MiB, "
                         f"so it has no header line (is it a CSV file?)")
    end, rows_at = (brk.start(), brk.end()) if brk else (len(head), len(head))
    line = head[start:end]
    if b"\0" in line:
        raise StageError(f"CSV file {path} is not CSV text: its first line contains NUL bytes "
                         f"(binary data, or text in UTF-16/UTF-32; save it as UTF-8)")
    if not line.strip():
        return None, rows_at
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StageError(
            f"CSV file {path}: the header line is not valid UTF-8 (byte "
            f"0x{line[exc.start]:02x} at offset {start + exc.start}: "
            f"{line[:120].decode('utf-8', 'backslashreplace')}); save the file as UTF-8"
        ) from None
    try:
        fields = next(csv.reader([text], strict=True))
    except csv.Error as exc:
        raise StageError(f"CSV file {path}: cannot parse the header line ({exc}): "
                         f"{text[:120]!r}") from None
    return [h.strip() for h in fields], rows_at


def _count_lines(buf: bytes, start: int = 0, end: int | None = None) -> int:
    """Physical lines in `buf[start:end]` (line breaks: \\n, \\r\\n, \\r); the last one
    may lack its line break. `start` and `end` must not split a \\r\\n."""
    end = len(buf) if end is None else end
    n = buf.count(b"\n", start, end)
    cr = buf.count(b"\r", start, end)
    if cr:
        n += cr - buf.count(b"\r\n", start, end)
    if end > start and buf[end - 1] not in b"\r\n":
        n += 1
    return n


def _last_line(buf: bytes) -> bytes:
    body = buf.rstrip(b"\r\n")
    return body[max(body.rfind(b"\n"), body.rfind(b"\r")) + 1:]


def line_is_closed(line: bytes) -> bool:
    """False when `line` (without its line break) ends inside a quoted field."""
    return b'"' not in line or _CLOSED_LINE.fullmatch(line) is not None


def _split_open_quotes(buf: bytes, first_line: int) -> tuple[bytes, list[tuple[int, bytes]]]:
    """(`buf` without the lines that leave a quote open, [(line number, line)] of those).

    RE2 (pyarrow.compute) screens every line at once; the few it flags (and pieces holding a
    lone \r line break) are checked again one by one with `line_is_closed`.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    pieces = pc.split_pattern(pa.array([buf], pa.binary()), b"\n")[0].values
    ok = pc.match_substring_regex(pieces, _CLOSED_LINE_RE2)
    if pc.all(ok).as_py():
        return buf, []
    ends = np.cumsum(pc.binary_length(pieces).to_numpy(zero_copy_only=False) + 1)
    drop: list[tuple[int, int]] = []
    bad: list[tuple[int, bytes]] = []
    counted, line_no = 0, first_line  # line_no: the number of the line starting at `counted`
    for i in np.flatnonzero(~ok.to_numpy(zero_copy_only=False)).tolist():
        at = int(ends[i - 1]) if i else 0
        for line in buf[at:int(ends[i])].splitlines(keepends=True):
            if not line_is_closed(line.rstrip(b"\r\n")):
                line_no += _count_lines(buf, counted, at)
                counted = at
                bad.append((line_no, line))
                drop.append((at, at + len(line)))
            at += len(line)
    keep, prev = [], 0
    for a, b in drop:
        keep.append(buf[prev:a])
        prev = b
    keep.append(buf[prev:])
    return b"".join(keep), bad


def _chunks(path: Path, start: int, size: int) -> Iterator[bytes]:
    """The bytes of `path` from `start`, in chunks of about `size` cut after a line break."""
    carry = b""
    with open(path, "rb") as f:
        f.seek(start)
        while True:
            data = f.read(size)
            if not data:
                if carry:
                    yield carry
                return
            buf = carry + data
            cut = buf.rfind(b"\n")  # not between the \r and \n of a CRLF
            if cut < 0:
                cut = buf.rfind(b"\r")
            if cut < 0:
                carry = buf
                continue
            carry = buf[cut + 1:]
            yield buf[: cut + 1]


def typed_read_ok(na: set[bytes]) -> bool:
    """Whether pyarrow may convert values while it parses (`iter_raw(types=...)`): only when
    no NA value has surrounding whitespace, since the parser matches NA values untrimmed."""
    return all(v == v.strip() for v in na)


def iter_raw(path: Path, header: list[str], quarantine: Quarantine | None,
             block_rows: int = 65_536, types: Mapping[str, str] | None = None,
             na: set[bytes] | None = None) -> Generator[Any, None, None]:
    """Record batches of raw bytes columns named by `header` (the file's own header line is
    skipped); rows with a wrong field count or an unterminated quote go to `quarantine`.

    With `types` (column -> "float32" | "string") and `na`, each chunk is first parsed with
    the values converted by pyarrow's multithreaded parser (float32 columns with `na` as
    nulls, string columns as validated UTF-8); a chunk whose values do not all convert that
    way (a bad number, whitespace around a number or an NA value, invalid UTF-8) is parsed
    again as raw bytes, so `csv_values.decode_batch` gives every chunk the same result either way."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    _, rows_at = _read_head(path)
    names = list(header)
    read_options = pcsv.ReadOptions(column_names=names, use_threads=True)
    convert_options = pcsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.binary()), strings_can_be_null=False,
        quoted_strings_can_be_null=False)
    typed_options = None
    if types is not None and na is not None and typed_read_ok(na):
        arrow_types = {"float32": pa.float32(), "string": pa.string()}
        typed_options = pcsv.ConvertOptions(
            column_types={n: arrow_types[types[n]] if n in types else pa.binary()
                          for n in names},
            null_values=sorted(v.decode("utf-8", "replace") for v in na),
            strings_can_be_null=False, quoted_strings_can_be_null=False)

    def parse(buf: bytes) -> tuple[Any, list[Any]]:
        if not buf.strip(b"\r\n"):  # nothing but line breaks: pyarrow calls that an error
            return pa.table({n: pa.array([], pa.binary()) for n in names}), []
        for options in ((typed_options, convert_options) if typed_options else
                        (convert_options,)):
            invalid: list[Any] = []

            def on_invalid(row: Any, invalid: list[Any] = invalid) -> str:
                invalid.append((row.expected_columns, row.actual_columns, row.text))
                return "skip"

            try:
                table = pcsv.read_csv(
                    pa.py_buffer(buf), read_options=read_options, convert_options=options,
                    parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid))
            except pa.ArrowInvalid as exc:
                if options is typed_options:
                    continue  # a value that does not convert: the raw bytes path finds it
                raise StageError(f"CSV file {path}: cannot be parsed ({str(exc)[:300]})") from None
            return table, invalid
        raise AssertionError("unreachable")

    line_no = 2  # the header is line 1
    for buf in _chunks(path, rows_at, max(1 << 16, block_rows * 64)):
        lines = _count_lines(buf)
        table, invalid = parse(buf)
        if b'"' in buf and (table.num_rows + len(invalid) < lines
                            or not line_is_closed(_last_line(buf))):
            # a quoted field ran across lines (or blank lines were skipped): re-sync per line
            buf, open_quotes = _split_open_quotes(buf, line_no)
            if open_quotes:
                table, invalid = parse(buf)
                if quarantine is not None:
                    for n, text in open_quotes:
                        quarantine.add(str(path), UNTERMINATED,
                                       text.rstrip(b"\r\n").decode("utf-8", "backslashreplace"),
                                       "unterminated_quote", line=n)
        line_no += lines
        if quarantine is not None:
            for expected, actual, text in invalid:
                quarantine.add(str(path), f"expected {expected} fields, found {actual}", text,
                               "field_count")
        if table.num_rows:
            yield from table.combine_chunks().to_batches(max_chunksize=block_rows)
