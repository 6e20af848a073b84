"""All-or-nothing writes of a set of files into one folder.

The config, the ready-to-apply files and the report land here together: every
file is first written in full to a temporary file beside its target, and only
when all of them are on disk are they renamed into place. A rename replaces the
target in one step, so a reader never sees half a file; a user's existing file
is kept as ``NAME.bak`` (unless the new content is the same, which would
otherwise overwrite an older, different ``.bak``). A folder that cannot be
written gives one :class:`~common.errors.UsageError` line and leaves nothing
behind: no temporaries, no folders we created, no half-replaced set.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from common.catalog import t
from common.errors import UsageError


def check_out_dir(out_dir: os.PathLike | str, lang: str | None = None) -> None:
    """Refuse, in one line and before anything is measured, an output folder
    the files could not be written into later: a file in its place, or a folder
    (or the nearest existing parent of a new one) this user cannot write.
    Creates nothing; :meth:`AtomicWriter.write` still handles what changes
    meanwhile (a disk that fills up)."""
    out = Path(out_dir)
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise UsageError(t("atomic.not_a_folder", lang, path=out))
        if not os.access(out, os.W_OK | os.X_OK):
            raise UsageError(t("atomic.cannot_write", lang, path=out, reason=_unwritable(out)))
        return
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(t("atomic.cannot_create", lang, path=out, reason=f"{parent} is not a folder"))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(t("atomic.cannot_create", lang, path=out, reason=f"{parent}: {_unwritable(parent)}"))


def _unwritable(path: Path) -> str:
    """Why this user cannot write ``path``: a read-only mount, or permissions."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    return "permission denied"


_TMP_PREFIX = ".oomvet-tmp-"
_OLD_PREFIX = ".oomvet-old-"


@dataclass
class _Pending:
    target: Path
    tmp: Path
    old: Path | None = None      # hard link / copy of the file being replaced
    replaced: bool = False


@dataclass
class AtomicWriter:
    """Writes a set of files into a folder, all or nothing.

    ``replace`` and ``link`` are the two filesystem steps a test may want to
    fail on purpose; they default to the real ones.
    """

    replace: Callable[[os.PathLike, os.PathLike], None] = os.replace
    link: Callable[[os.PathLike, os.PathLike], None] = os.link
    lang: str | None = None
    written: list[Path] = field(default_factory=list)

    def write(self, out_dir: os.PathLike | str, files: Mapping[str, str | bytes]) -> list[Path]:
        """Write ``{name: text or bytes}`` into ``out_dir``; returns the paths that
        now hold new content (unchanged files are left alone and not listed)."""
        out = Path(out_dir)
        for name in files:
            _check_name(name, self.lang)
        created = self._ensure_dir(out)
        pending: list[_Pending] = []
        try:
            for name, content in files.items():
                target = out / name
                data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
                if target.is_symlink() or (target.exists() and not target.is_file()):
                    raise UsageError(t("atomic.target_not_file", self.lang, path=target))
                if target.is_file() and _same_bytes(target, data):
                    continue  # no change: keep the file and, above all, its older .bak
                pending.append(_Pending(target, _write_temp(out, name, data)))
            for p in pending:
                if p.target.exists():
                    p.old = self._keep_old(out, p.target)
        except UsageError:
            self._discard(pending, created)
            raise
        except OSError as exc:
            self._discard(pending, created)
            raise UsageError(t("atomic.cannot_write", self.lang, path=out, reason=_reason(exc))) from None

        try:
            for p in pending:
                self.replace(p.tmp, p.target)
                p.replaced = True
        except OSError as exc:
            self._roll_back(pending)
            self._discard(pending, created)
            raise UsageError(t("atomic.cannot_write", self.lang, path=out, reason=_reason(exc))) from None

        for p in pending:
            if p.old is not None:
                # the old content is safe in p.old until this rename; if it fails
                # the new files still stand, so only the backup is missing
                try:
                    os.replace(p.old, p.target.with_name(p.target.name + ".bak"))
                except OSError:
                    _unlink(p.old)
        _fsync_dir(out)
        self.written = [p.target for p in pending]
        return list(self.written)

    def _ensure_dir(self, out: Path) -> list[Path]:
        """Create ``out`` (and missing parents); returns the folders we made so a
        failure can remove them again."""
        if out.exists() or out.is_symlink():
            if not out.is_dir():
                raise UsageError(t("atomic.not_a_folder", self.lang, path=out))
            return []
        missing = []
        probe = out
        while not probe.exists() and probe != probe.parent:
            if probe.is_symlink():  # dangling link: mkdir would fail with a confusing error
                break
            missing.append(probe)
            probe = probe.parent
        try:
            out.mkdir(parents=True)
        except OSError as exc:
            raise UsageError(t("atomic.cannot_create", self.lang, path=out, reason=_reason(exc))) from None
        return missing  # deepest first: the order to remove them in

    def _keep_old(self, out: Path, target: Path) -> Path:
        fd, name = tempfile.mkstemp(prefix=_OLD_PREFIX, dir=out)
        os.close(fd)
        old = Path(name)
        old.unlink()
        try:
            self.link(target, old)   # cheap, and the same inode keeps its metadata
        except OSError:
            shutil.copy2(target, old)  # filesystems without hard links
        return old

    def _roll_back(self, pending: list[_Pending]) -> None:
        for p in pending:
            if not p.replaced:
                continue
            try:
                if p.old is not None:
                    os.replace(p.old, p.target)
                    p.old = None
                else:
                    p.target.unlink()
            except OSError:
                pass

    @staticmethod
    def _discard(pending: list[_Pending], created: list[Path]) -> None:
        for p in pending:
            _unlink(p.tmp)
            if p.old is not None:
                _unlink(p.old)
        for folder in created:
            try:
                folder.rmdir()
            except OSError:
                break


def write_files(out_dir: os.PathLike | str, files: Mapping[str, str | bytes], lang: str | None = None) -> list[Path]:
    """Write ``files`` into ``out_dir`` all or nothing (see :class:`AtomicWriter`)."""
    return AtomicWriter(lang=lang).write(out_dir, files)


def _check_name(name: str, lang: str | None) -> None:
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
            or "\\" in name or "\0" in name or name.startswith((_TMP_PREFIX, _OLD_PREFIX))):
        raise UsageError(t("atomic.bad_name", lang, name=name))


def _write_temp(out: Path, name: str, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{name}.", dir=out)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; these files are for the user and tools
    except BaseException:
        _unlink(Path(tmp))
        raise
    return Path(tmp)


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _reason(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__
