"""Reading YAML that users write: PyYAML's safe_load, stricter where silence would mislead.

- A key given twice in one mapping is an error naming both lines (safe_load keeps
  the last one silently: a second `model:` would simulate another model under
  the first one's name). Keys merged in with `<<: *anchor` may still be
  overridden, as YAML intends.
- Files are read up to `MAX_YAML_BYTES` and aliases may expand to at most
  `MAX_YAML_VALUES` values, so a special file (/dev/zero) or a "billion laughs"
  document is refused instead of exhausting memory.
- Every I/O, decoding or syntax problem is an InputError naming the file, the
  line and the column.

Only the safe tags are constructed (the loader is a SafeLoader): `!!python/...`
tags are YAML errors.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

from scalesim.errors import InputError

# Far above any scenario, node design or catalog (the largest shipped file is ~50 kB).
MAX_YAML_BYTES = 16 * 2**20
MAX_YAML_VALUES = 1_000_000
# Integers beyond any float (10^308): Python could not even print some of them (4,300 digits).
MAX_INT_BITS = 1024
_MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeySafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
        if isinstance(node, MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:
                    continue            # unhashable: the base class reports it
                if first != key_node.start_mark.line + 1:
                    raise ConstructorError(
                        None, None, f"duplicate key '{key}' (first given at line {first}, again at line "
                        f"{key_node.start_mark.line + 1}); YAML would silently keep only the last one",
                        key_node.start_mark)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Node) -> int:
        if len(str(node.value)) > 4000:
            raise ConstructorError(None, None, "an integer with thousands of digits", node.start_mark)
        value = super().construct_yaml_int(node)
        _not_base_60_or_octal(node, value, "0" if str(node.value).lstrip("+-").startswith("0") else "")
        if abs(value).bit_length() > MAX_INT_BITS:
            raise ConstructorError(None, None, f"an integer beyond 2^{MAX_INT_BITS} (no quantity is that large)",
                                   node.start_mark)
        return value


    def construct_yaml_float(self, node: Node) -> float:
        value = super().construct_yaml_float(node)
        _not_base_60_or_octal(node, value, "")
        return value


def _not_base_60_or_octal(node: Node, value, zero: str) -> None:
    """YAML 1.1 reads 2:08 as 128 (base 60) and 0200 as 128 (octal): numbers a user did not mean, silently
    (`global_batch: 0200`). Refused with what YAML made of them; 0x80 says what it is. A zero-padded number that
    reads the same either way (0, 00, 07) is left alone, as 08 and 09 (text to YAML 1.1, read as 8 and 9)."""
    text = str(node.value).replace("_", "")
    octal = (zero and len(text.lstrip("+-")) > 1 and text.lstrip("+-")[1:2].isdigit()
             and value != int(text, 10))
    if ":" in text or octal:
        raise ConstructorError(None, None, f"{node.value} is {'a base-60' if ':' in text else 'an octal'} number in "
                               f"YAML 1.1 ({value}); write it in decimal, or quote it if it is text", node.start_mark)


UniqueKeySafeLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeySafeLoader.construct_yaml_int)
UniqueKeySafeLoader.add_constructor("tag:yaml.org,2002:float", UniqueKeySafeLoader.construct_yaml_float)


def _expanded_size(root: Node) -> int:
    """How many values the document has with every alias expanded (linear time, memoised)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes and sizes[id(node)] >= 0:
            continue
        children = _children(node)
        if children_done:
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children), MAX_YAML_VALUES + 1)
            continue
        if sizes.get(id(node)) == -1:
            raise _document_error("an alias refers to a mapping or list that contains it (a recursive document)")
        sizes[id(node)] = -1
        stack.append((node, True))
        stack.extend((c, False) for c in children if sizes.get(id(c), -2) < 0)
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _document_error(problem: str) -> yaml.YAMLError:
    error = yaml.YAMLError(problem)
    error.problem = problem     # read_yaml prints `problem`
    return error


def parse_yaml(text: str) -> object:
    """safe_load with unique keys and bounded alias expansion; raises yaml.YAMLError."""
    loader = UniqueKeySafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_YAML_VALUES:
            raise _document_error(f"its aliases expand to more than {MAX_YAML_VALUES:,} values")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: Path, *, what: str = "file") -> object:
    """Parse a user's YAML file, turning every I/O or syntax problem into InputError."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{what} not found", file=str(path)) from None
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise InputError(f"cannot read {what}: {reason}", file=str(path)) from None
    if len(raw) > MAX_YAML_BYTES:
        raise InputError(f"{what} is larger than {MAX_YAML_BYTES // 2**20} MiB; scenarios and designs "
                         f"are a few kB", file=str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read {what}: not UTF-8 text (byte {exc.start})", file=str(path)) from None
    return parse_yaml_text(text, file=str(path))


def parse_yaml_text(text: str, *, file: str | None) -> object:
    """`parse_yaml`, with every problem an InputError naming `file`, the line and the column."""
    try:
        return parse_yaml(text)
    except yaml.reader.ReaderError as exc:          # a character YAML does not allow (NUL, controls)
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError(f"invalid YAML at line {line}, column {column}: {exc.reason} (U+{code:04X}); "
                         f"is this a text file?", file=file) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise InputError(f"invalid YAML{where}: {problem}", file=file) from None
    except RecursionError:
        raise InputError("invalid YAML: nested too deeply", file=file) from None
