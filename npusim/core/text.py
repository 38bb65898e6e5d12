"""Text that cannot be written back out.

Python strings can hold what no file encoding can: a lone UTF-16 surrogate, from a JSON
escape such as ``"\\ud800"`` or from a command-line byte that is not UTF-8 (decoded with
``surrogateescape``).  Such a name would pass every check and then fail when the results
are written, after the whole simulation has run; the readers refuse it up front instead,
naming where it is.
"""

from __future__ import annotations

from typing import Any


def is_encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unencodable_path(value: Any, path: str = "") -> str | None:
    """The field path (``a.b[2]``) of the first string, or mapping key, inside ``value``
    that cannot be written as UTF-8; ``None`` when there is none."""
    if isinstance(value, str):
        return None if is_encodable(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and not is_encodable(key):
                return f"{path}.{ascii(key)}" if path else ascii(key)
            found = unencodable_path(item, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = unencodable_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def join_surrogate_pairs(value: Any) -> Any:
    """``value`` with every string's UTF-16 surrogate pairs joined into the character
    they encode: YAML's ``"\\ud83d\\ude00"`` escapes (as ``json.dumps`` writes a
    character beyond U+FFFF) load as two halves, which JSON readers join; a lone half
    stays for :func:`unencodable_path` to report."""
    if isinstance(value, str):
        if is_encodable(value):
            return value
        try:
            return value.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:  # a lone half
            return value
    if isinstance(value, dict):
        joined = {join_surrogate_pairs(key): join_surrogate_pairs(item)
                  for key, item in value.items()}
        if len(joined) < len(value):  # "\ud83d\ude00" and the character itself, both keys
            twice = next(key for key in joined
                         if sum(join_surrogate_pairs(k) == key for k in value) > 1)
            raise ValueError(f"key {ascii(twice)} appears twice in one mapping (once "
                             "written as an escaped surrogate pair); expected each key once")
        return joined
    if isinstance(value, list):
        return [join_surrogate_pairs(item) for item in value]
    return value


UNENCODABLE = ("holds a character that cannot be written as UTF-8 (a lone surrogate, "
               "such as a JSON \\ud800 escape or a byte that is not UTF-8); expected text")


def shown(text: str) -> str:
    """``text`` quoted for an error message, with anything unprintable escaped (a lone
    surrogate would otherwise break the terminal write that reports it)."""
    return ascii(text)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 stage``, ``3 stages``: a count and its noun in the right number (``plural``
    when it is not the noun plus s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def utf16_hint(data: bytes) -> str:
    """A note for a decoding error when ``data`` (a file's first bytes) looks like UTF-16,
    as Windows PowerShell (``>``) and Notepad save text: a byte-order mark, or a NUL
    byte beside every ASCII character.  Empty otherwise."""
    head = data[:200]
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or _nul_beside_each_ascii(head):
        return " (it looks like UTF-16, as Windows PowerShell and Notepad save text: re-save it as UTF-8)"
    return ""


def _nul_beside_each_ascii(head: bytes) -> bool:
    """Whether ``head`` is ASCII text as UTF-16 without a byte-order mark: every second
    byte NUL (little- or big-endian), the others no control character.  A binary file has NULs
    too, but not in that pattern (an ELF header is not UTF-16)."""
    pairs = len(head) // 2
    if pairs < 2:
        return False
    for nul in (1, 0):  # little-endian: 'a\0'; big-endian: '\0a'
        zeros, chars = head[nul::2][:pairs], head[1 - nul::2][:pairs]
        if zeros.count(0) == pairs and all(c >= 32 or c in (9, 10, 13) for c in chars):
            return True
    return False
