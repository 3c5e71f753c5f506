# Builds the training corpus from permissively licensed Python sources on this machine: the
# standard library (PSF) and installed distributions whose metadata or licence file says PSF,
# BSD, MIT or Apache-2.0. Deduplicated by exact hash of normalised text; split by file.
import hashlib
import importlib.metadata
import os
import random
import re
import sys
import sysconfig

ALLOWED = ("PSF-2.0", "BSD-2-Clause", "BSD-3-Clause", "MIT", "Apache-2.0")
MAX_FILE_BYTES = 400_000  # larger .py files are generated tables, not code worth learning

# Licence names as they appear in License / License-Expression fields, after normalise_name
# drops case, punctuation and the words "the", "license", "version", "software".
_NAMES = {
    "PSF-2.0": {"psf", "psf-2.0", "psfl", "python foundation", "psf-2"},
    "MIT": {"mit", "expat"},
    "BSD-3-Clause": {"bsd", "new bsd", "modified bsd", "revised bsd", "bsd-3", "bsd-3-clause", "3-clause bsd",
                     "bsd 3-clause", "bsd 3 clause", "bsd-3-clause new"},
    "BSD-2-Clause": {"bsd-2-clause", "simplified bsd", "2-clause bsd", "bsd 2-clause", "bsd 2 clause"},
    "Apache-2.0": {"apache", "apache-2.0", "apache 2.0", "apache 2", "apache2", "apache-2"},
}
_DROPPED_WORDS = {"the", "license", "licence", "version", "software", "v"}
_CLASSIFIERS = {
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: BSD License": "BSD-3-Clause",
    "License :: OSI Approved :: Apache Software License": "Apache-2.0",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
}
# Opening phrases of the licence texts, for fields or LICENSE files that hold the whole text.
_TEXT_MARKERS = [
    ("Permission is hereby granted, free of charge", "MIT"),
    ("Redistribution and use in source and binary forms", "BSD-3-Clause"),
    ("Apache License", "Apache-2.0"),
    ("PYTHON SOFTWARE FOUNDATION LICENSE", "PSF-2.0"),
]
_COPYLEFT = re.compile(r"\b(GPL|LGPL|AGPL|MPL|EPL|CDDL|copyleft)\b", re.I)


def normalise_name(text):
    words = re.sub(r"[(),:]", " ", text.lower()).split()
    key = " ".join(dict.fromkeys(w for w in words if w not in _DROPPED_WORDS))
    for name, spellings in _NAMES.items():
        if key in spellings:
            return name
    return None


def expression_licence(expr):
    """An SPDX expression: AND needs every part allowed, OR any part. Returns the first allowed
    part or None."""
    expr = expr.replace("(", " ").replace(")", " ")
    if " AND " in expr:
        parts = [normalise_name(p) for p in expr.split(" AND ")]
        return parts[0] if all(parts) else None
    for part in expr.split(" OR "):
        name = normalise_name(part)
        if name:
            return name
    return None


def text_licence(text):
    if _COPYLEFT.search(text[:3000]):
        return None
    for marker, name in _TEXT_MARKERS:
        if marker.lower() in text[:3000].lower():
            return name
    return None


def dist_licence(dist):
    """(licence, where it was read) for an installed distribution, or (None, reason)."""
    meta = dist.metadata
    expr = meta.get("License-Expression")
    if expr:
        return expression_licence(expr), "License-Expression: " + expr
    field = (meta.get("License") or "").strip()
    if field and field.upper() != "UNKNOWN":
        name = expression_licence(field) if len(field) < 80 else text_licence(field)
        if name:
            return name, "License: " + field[:80]
        if len(field) < 80:
            return None, "License: " + field
    classified = {_CLASSIFIERS[c] for c in meta.get_all("Classifier") or [] if c in _CLASSIFIERS}
    other = [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::") and c not in _CLASSIFIERS]
    if len(classified) == 1 and not other:
        return classified.pop(), "Classifier"
    for f in dist.files or []:
        base = os.path.basename(str(f)).upper()
        if base.startswith(("LICENSE", "LICENCE", "COPYING")) and ".dist-info" in str(f):
            try:
                text = dist.locate_file(f).read_text(errors="replace")
            except OSError:
                continue
            name = text_licence(text)
            if name:
                return name, "file " + str(f)
    return None, "no recognised licence"


def normalise_text(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def read_source(path):
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return None
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    text = normalise_text(text)
    return text if text.strip() else None


def stdlib_files():
    root = sysconfig.get_paths()["stdlib"]
    skip = {"site-packages", "dist-packages", "__pycache__", "idlelib", "lib2to3", "turtledemo"}
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        paths += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    return root, paths


def package_sources():
    """[(name, version, licence, evidence, [paths])] for installed distributions with an allowed
    licence, and [(name, version, reason)] for the ones left out."""
    kept, dropped, seen = [], [], set()
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
        name = dist.metadata["Name"]
        if not name or name.lower() in seen:
            continue
        seen.add(name.lower())
        licence, evidence = dist_licence(dist)
        if licence not in ALLOWED:
            dropped.append((name, dist.version, evidence))
            continue
        paths = sorted(str(dist.locate_file(f)) for f in dist.files or [] if str(f).endswith(".py"))
        if paths:
            kept.append((name, dist.version, licence, evidence, paths))
    return kept, dropped


def build_corpus(max_bytes, per_package_bytes, val_fraction, seed):
    """Returns (train_texts, val_texts, licences record). The standard library comes first, then
    packages in a seeded order, each capped at per_package_bytes, until max_bytes."""
    rng = random.Random(seed)
    stdlib_root, stdlib_paths = stdlib_files()
    packages, dropped = package_sources()
    rng.shuffle(packages)
    sources = [("python-stdlib", sys.version.split()[0], "PSF-2.0", "stdlib at " + stdlib_root, stdlib_paths)]
    sources += packages
    seen_hashes, docs, record, total = set(), [], [], 0
    for name, version, licence, evidence, paths in sources:
        used = files = 0
        for path in paths:
            if total >= max_bytes or used >= per_package_bytes:
                break
            text = read_source(path)
            if text is None:
                continue
            digest = hashlib.sha256(text.encode()).digest()
            if digest in seen_hashes:
                continue
            seen_hashes.add(digest)
            docs.append(text)
            size = len(text.encode())
            used, files, total = used + size, files + 1, total + size
        if files:
            record.append({"package": name, "version": version, "licence": licence, "evidence": evidence,
                           "files": files, "bytes": used})
    order = list(range(len(docs)))
    rng.shuffle(order)
    n_val = max(1, int(len(docs) * val_fraction))
    val = [docs[i] for i in order[:n_val]]
    train = [docs[i] for i in order[n_val:]]
    licences = {"allowed": list(ALLOWED), "total_bytes": total, "files": len(docs),
                "train_files": len(train), "val_files": len(val), "sources": record,
                "excluded": [{"package": n, "version": v, "reason": r} for n, v, r in dropped]}
    return train, val, licences
