"""Which pod incarnation each pinned host key was pinned for: ``DIR/pins.json``.

``ssh-bootstrap hosts --repin-for-uid UID`` records, per pinned name (``[host]:port``), the
pod uid the discovery daemon said the address belonged to.  A later call with a different uid
means the API server gave the address to a new pod, whose new host key may then replace the
pin; the same uid (or none) keeps the usual refusal of a changed key.

Pure parse/render; the file is ``{"version": 1, "uids": {"[10.0.0.5]:2222": "<uid>"}}`` and is
written by the caller atomically under ``DIR/.lock``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from elastic.errors import ConfigError

VERSION = 1


def parse_pin_owners(text: str, where: str = "pins.json") -> dict[str, str]:
    """``pins.json`` text -> ``{name: uid}``; empty text is no records; ConfigError if malformed."""
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON: {exc}") from None
    uids = doc.get("uids") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(uids, dict) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in uids.items()):
        raise ConfigError(f"{where} is not a version {VERSION} pin-owner file")
    return dict(uids)


def render_pin_owners(uids: Mapping[str, str]) -> str:
    """``{name: uid}`` -> ``pins.json`` text (sorted, stable)."""
    return json.dumps({"version": VERSION, "uids": dict(sorted(uids.items()))}, indent=1) + "\n"


def is_new_incarnation(recorded: str | None, uid: str | None) -> bool:
    """True when ``uid`` is given and is not the uid the pin was recorded for (none recorded counts)."""
    return bool(uid) and recorded != uid
