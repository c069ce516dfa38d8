"""Makes ``stop80_crashed.tar.gz`` and ``stop80_answers.json`` (``test_storeschema``): a store as
stop 80's code left it when killed (frames in its redo journal), and what that code answers when
it opens a copy of it. Run with that code first on the path, from its tree:

    git worktree add /tmp/stop80 cad54b6
    cd /tmp/stop80 && PYTHONPATH=. python <this file> <out>
    tar czf stop80_crashed.tar.gz -C <out>/crashed .
"""

import hashlib
import json
import shutil
import sys
from pathlib import Path

from superpeer.store import SqliteStore

PAD = b"<a publication of a kilobyte or so>" * 30
FILES = ("", "-wal", "-redo")


def short(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def body(i: int) -> bytes:
    return PAD + f"#{i}".encode()


def data(name: str, i: int) -> bytes:
    return f"[{name}]".encode() + body(i) + b"[end]"


def main(out: Path) -> None:
    work, crashed, probe = out / "work", out / "crashed", out / "probe"
    work.mkdir(parents=True)
    crashed.mkdir()
    store = SqliteStore(work / "state.sqlite", sync="normal", fold_bytes=16384)
    keys = [f'["pk1-owner", "urn:r:{i}", 0]' for i in range(40)]
    for i, key in enumerate(keys):
        at = 1.0 + i
        store.log_publication(key, data("log", i), at, body(i))
        store.set_pending("versions", f"r{i % 7}", {"v": i, "body": key})
        for peer in ("p", "q") if i % 3 else ("p",):
            store.put_mail(peer, key, data(peer, i), at, body(i))
        if i % 5 == 4:
            store.acknowledge("p", store.mail_after("p", 0, 3)[-1][0], at)
        if i % 11 == 10:
            store.drop_bodies()
        store.commit()
    for suffix in FILES:  # as a killed process leaves them
        shutil.copyfile(f"{work}/state.sqlite{suffix}", crashed / f"state.sqlite{suffix}")
    shutil.copytree(crashed, probe)
    store.close()
    again = SqliteStore(probe / "state.sqlite", sync="normal", fold_bytes=16384)
    answers = {
        "replayed": again.replayed,
        "last_delivery": again.last_delivery(),
        "mail": {p: [[n, short(d)] for n, d in again.mail_after(p, 0, 100)] for p in "pq"},
        "log": [short(d) for d in again.logged_since(0.0)],
        "bodies": {k: (short(b) if (b := again.body(k)) else None) for k in keys},
        "logged": {k: again.is_logged(k) for k in keys},
        "versions": again.pending("versions"),
        "refs": dict(again._read("SELECT key, refs FROM body_refs")),
        "delivered": sorted(map(list, again._read("SELECT peer, key, at FROM delivered"))),
    }
    again.close()
    (out / "stop80_answers.json").write_text(json.dumps(answers, indent=0, sort_keys=True))
    shutil.rmtree(work)
    shutil.rmtree(probe)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
