"""Every registered judgment (``registry.py``): importing this module registers them all.

The fold imports it to make them; so does every reader of a session's frames (an attached
view, ``tokmon view`` and ``--web``), which never imports the fold but must know each
judgment's view type to decode a snapshot that holds it. A new judgment's module is
added here, once.
"""

from __future__ import annotations

import tokmon.model.judge.client  # noqa: F401
import tokmon.model.judge.connection_judgment  # noqa: F401
import tokmon.model.judge.errors_judgment  # noqa: F401
import tokmon.model.judge.images_judgment  # noqa: F401
import tokmon.model.judge.reasoning  # noqa: F401
import tokmon.model.judge.storage  # noqa: F401
import tokmon.model.judge.structured_judgment  # noqa: F401
import tokmon.model.judge.usage_judgment  # noqa: F401
