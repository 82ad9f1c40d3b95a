"""Frames per commit by b-tree, from a WAL file (used by wal_frames.sh).

    python3 wal_frames.py WAL FROM_OFFSET PAGES

WAL: a copy of the WAL; FROM_OFFSET: its size before the load (frames at or after it are the
load's); PAGES: lines `name|page,page,...` (SQLite's dbstat, grouped by b-tree). A frame whose
database-size field is not 0 ends a commit. A page owned by no b-tree at the end is on the
freelist; `dbstat` names page 1 (the file's header: its size, the freelist's head) sqlite_schema."""
import collections
import struct
import sys


def main():
    wal_path, start, pages_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    owner = {}
    for line in open(pages_path):
        name, _, pages = line.strip().partition("|")
        for p in pages.split(","):
            if p.isdigit():
                owner[int(p)] = name
    wal = open(wal_path, "rb").read()
    page_size = struct.unpack(">I", wal[8:12])[0]
    salts = struct.unpack(">II", wal[16:24])
    frame = 24 + page_size
    off = 32
    commits = frames = 0
    per = collections.Counter()
    pending = []
    while off + frame <= len(wal):
        pgno, db_size, s1, s2 = struct.unpack(">IIII", wal[off:off + 16])
        if (s1, s2) != salts:
            break
        if off >= start:
            pending.append(pgno)
            if db_size:
                commits += 1
                frames += len(pending)
                for p in pending:
                    per[owner.get(p, "(freelist)")] += 1
                pending = []
        off += frame
    if not commits:
        sys.exit("wal_frames: no commit in the load's frames")
    print(f"commits: {commits}; frames: {frames}; frames per commit: {frames / commits:.2f}")
    for name, n in per.most_common():
        print(f"{n / commits:7.2f}  {name}")


if __name__ == "__main__":
    main()
