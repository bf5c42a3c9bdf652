"""What the workers of a pytest-xdist run upload to a deployed endpoint, deleted by the
controller once every worker has finished (``pytest -n N --mmelocal-endpoint NAME``).

Two workers may add the same TargetModel with the same bytes: the first uploads it, the
second finds it there and uses it as it is (to the second, an object that was there before
its test, which it never deletes). Had the first worker deleted it at its teardown, the
second's calls would find the model gone, and no reference count can be kept across the
workers' processes. So a worker deletes nothing: before each upload it records the bucket,
the key and the SHA-256 in a file of its own, in a folder the controller hands to every
worker (xdist's ``workerinput``); at the end of the session, after every worker is done,
the controller deletes each recorded object that still holds what was uploaded
(:func:`~mmelocal.testing.remote_endpoint.delete_uploaded`). A worker that crashed has
recorded what it began to upload; a controller that is killed leaves the objects, as a
killed run without xdist leaves a test's.

Keys of their own per worker were the other way out: they would change the TargetModel
the test names (``invoke_endpoint(TargetModel="model-1.tar.gz")`` is written in the
test), so a test file would no longer run unchanged on the emulator and on the endpoint.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

#: the ``workerinput`` entry that names the folder of the workers' records
WORKERINPUT_KEY = "mmelocal_uploads_folder"
#: the controller's config attribute that holds that folder (no pytest import: a plain
#: attribute, not a stash key)
_FOLDER = "_mmelocal_uploads_folder"


class UploadLedger:
    """One worker's record of what its tests uploaded: a JSON line per upload."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, bucket: str, key: str, sha256: str) -> None:
        """Note an upload of ``sha256`` to ``s3://bucket/key`` (before it starts)."""
        line = json.dumps({"bucket": bucket, "key": key, "sha256": sha256})
        with self.path.open("a", encoding="utf-8") as ledger:
            ledger.write(line + "\n")


def recorded_uploads(folder: Path) -> dict[str, dict[str, set[str]]]:
    """bucket -> key -> the SHA-256s uploaded there, from every worker's record."""
    found: dict[str, dict[str, set[str]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            keys = found.setdefault(str(entry["bucket"]), {})
            keys.setdefault(str(entry["key"]), set()).add(str(entry["sha256"]))
    return found


def worker_ledger(config: Any) -> UploadLedger | None:
    """This xdist worker's ledger (None: not a worker, or a controller that handed no
    folder: then each test deletes its own uploads)."""
    workerinput = getattr(config, "workerinput", None)
    if not isinstance(workerinput, dict) or WORKERINPUT_KEY not in workerinput:
        return None
    worker = str(workerinput.get("workerid", "worker"))
    return UploadLedger(Path(workerinput[WORKERINPUT_KEY]) / f"{worker}.jsonl")


def hand_folder_to(node: Any) -> None:
    """On xdist's controller, for each worker it starts: the folder for the workers'
    records, made at the first worker (call it only with ``--mmelocal-endpoint``)."""
    config = node.config
    if getattr(config, _FOLDER, None) is None:
        setattr(config, _FOLDER, Path(tempfile.mkdtemp(prefix="mmelocal-uploads-")))
    node.workerinput[WORKERINPUT_KEY] = str(getattr(config, _FOLDER))


def delete_recorded_uploads(config: Any, name: str, region: str | None) -> str | None:
    """On xdist's controller at the end of the session: delete what the workers recorded
    (what still holds what they uploaded to endpoint ``name``'s prefix, in ``region``) and
    the records; the one-line reason when S3 refused (None: done, or nothing to do)."""
    folder: Path | None = getattr(config, _FOLDER, None)
    if folder is None:
        return None
    from mmelocal.aws.session import connect
    from mmelocal.errors import MmeLocalError
    from mmelocal.testing.remote_endpoint import delete_uploaded

    try:
        uploads = recorded_uploads(folder)
        if uploads:
            s3 = connect(region).s3
            for bucket, keys in uploads.items():
                delete_uploaded(s3, bucket, keys)
    except MmeLocalError as exc:
        return f"--mmelocal-endpoint {name}: deleting what the tests uploaded: {exc}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        setattr(config, _FOLDER, None)
    return None


__all__ = [
    "WORKERINPUT_KEY",
    "UploadLedger",
    "delete_recorded_uploads",
    "hand_folder_to",
    "recorded_uploads",
    "worker_ledger",
]
