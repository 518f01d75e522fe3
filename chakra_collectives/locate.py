"""Where a key of a YAML / JSON document sits in its text, for error messages that name a line.

>>> line_of("name: t\\nlinks:\\n  - {src: 0, dst: 1}\\n  - {src: 1, dst: 2}\\n", ["links", 1])
4
>>> line_of("npus: 3\\n", ["links"])           # no such key: the line of the document
1
"""

from __future__ import annotations

from typing import Any


def line_of(text: str, keys: list[Any]) -> int | None:
    """1-based line of the value at ``keys`` inside a YAML/JSON text (``None`` if unknown).

    When a key is missing, the line of the deepest value found on the way is given.
    """
    import yaml  # imported when used (start-up time: most commands read no YAML)

    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == str(key)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            found = node.value[key]
        else:
            found = None
        if found is None:
            break
        node = found
    return None if node is None else node.start_mark.line + 1


__all__ = ["line_of"]
