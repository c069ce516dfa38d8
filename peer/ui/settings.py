"""The web app's settings that a person changes on the page: ``<data>/ui-settings.json``.

Only what the page lets one change lives here (desktop notifications on or off); the file is
written when it changes, and once it exists it wins over the configuration's default
(``[ui] desktop_notifications``), so that a choice made on the page survives a restart.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from peer.files import write_atomically

log = logging.getLogger("peer.ui")


class UiSettings:
    def __init__(self, path: Path, *, desktop_notifications: bool) -> None:
        self.path = path
        self.desktop_notifications = desktop_notifications

    @classmethod
    def open(cls, path: Path, *, default_notifications: bool) -> UiSettings:
        settings = cls(path, desktop_notifications=default_notifications)
        try:
            saved = json.loads(path.read_bytes())
        except FileNotFoundError:
            return settings
        except (OSError, ValueError) as error:
            log.warning("event=unreadable_settings file=%s error=%r", path, str(error))
            return settings
        if isinstance(saved, dict) and isinstance(saved.get("desktop_notifications"), bool):
            settings.desktop_notifications = saved["desktop_notifications"]
        return settings

    def set_desktop_notifications(self, enabled: bool) -> None:
        self.desktop_notifications = enabled
        data = json.dumps({"desktop_notifications": enabled}, indent=2) + "\n"
        write_atomically(self.path, data.encode())
