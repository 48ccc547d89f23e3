"""A real multi-label document set from Debian's archive: the English long description of each package of
bookworm/main, labelled with its debtags ``use::`` facet (what the software is used for: editing, converting,
gameplaying, ...; a package often has several).

The texts come from the archive indexes that ``apt-get update`` fetches (``Packages`` for the tags,
``Translation-en`` for the descriptions), kept outside the repository in their own lists folder. Every description
is named in the manifest by its ``Description-md5`` (md5 of the text and a newline, the archive's own checksum),
so a rerun from the manifest reads exactly the same texts or stops naming the package that changed.

>>> use_labels("role::program, use::editing, use::viewing:images, use::TODO, works-with::text")
['editing', 'viewing']
>>> split_of("vim") in SPLITS
True
"""
import collections
import glob
import gzip
import hashlib
import json
import os
import subprocess

SPLITS = ("train", "validation", "test")
SPLIT_PERCENT = (70, 10, 20)
MIN_WORDS = 60
MIN_DOCUMENTS = 30
APT_UPDATE = ["apt-get", "update", "-o", "Acquire::Languages=en"]
INDEXES = {"packages": "*_debian_dists_bookworm_main_binary-amd64_Packages*",
           "translations": "*_debian_dists_bookworm_main_i18n_Translation-en*"}


def use_labels(tag_field):
    """The sorted distinct values of a ``Tag:`` field's ``use::`` facet, cut at their first ``:`` (``TODO``,
    debtags' mark of an unreviewed tag, left out)."""
    tags = [tag.strip() for tag in tag_field.replace("\n", " ").split(",")]
    return sorted({tag[len("use::"):].split(":")[0] for tag in tags if tag.startswith("use::")} - {"TODO"})


def split_of(source):
    """``train``, ``validation`` or ``test`` from sha256(source package name): its first 8 hex digits modulo 100
    against 70/10/20, so every binary package built from one source lands in the same split."""
    bucket = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) % 100
    return "train" if bucket < SPLIT_PERCENT[0] else "validation" if bucket < sum(SPLIT_PERCENT[:2]) else "test"


def stanzas(text):
    """The fields of each stanza of a Debian control file (continuation lines kept, joined by newlines)."""
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            yield fields


def description_md5(description):
    """The archive's ``Description-md5`` of a ``Description-en`` value: md5 of the text and a newline."""
    return hashlib.md5((description + "\n").encode("utf-8")).hexdigest()


def plain_text(description):
    """A ``Description-en`` as prose: the synopsis line, then the long description with its one-space indent
    removed and its `` .`` lines as paragraph breaks."""
    synopsis, _, body = description.partition("\n")
    lines = ["" if line.strip() == "." else line[1:] for line in body.splitlines()]
    return (synopsis.strip() + "\n\n" + "\n".join(lines).strip()).strip()


def corpus_entries(packages_text, translations_text):
    """One entry per distinct description of a package with ``use::`` tags and at least `MIN_WORDS` words
    (``package`` the first such package by name), over the labels held by at least `MIN_DOCUMENTS` of them; a
    description left with none of those labels is dropped."""
    texts = {fields["Description-md5"]: fields["Description-en"] for fields in stanzas(translations_text)
             if "Description-en" in fields}
    chosen = {}
    for fields in sorted(stanzas(packages_text), key=lambda fields: fields.get("Package", "")):
        md5, labels = fields.get("Description-md5"), use_labels(fields.get("Tag", ""))
        if labels and md5 in texts and md5 not in chosen and len(texts[md5].split()) >= MIN_WORDS:
            chosen[md5] = {"package": fields["Package"], "source": fields.get("Source", fields["Package"]).split()[0],
                           "version": fields["Version"], "description_md5": md5, "labels": labels}
    counts = collections.Counter(label for entry in chosen.values() for label in entry["labels"])
    kept = {label for label, count in counts.items() if count >= MIN_DOCUMENTS}
    entries = [dict(entry, labels=[label for label in entry["labels"] if label in kept]) for entry in chosen.values()]
    return [entry for entry in entries if entry["labels"]]


def documents(entries, translations_text):
    """``[{"package", "split", "text", "labels"}]`` of manifest entries, each text checked against its md5."""
    texts = {fields["Description-md5"]: fields["Description-en"] for fields in stanzas(translations_text)
             if "Description-en" in fields}
    out = []
    for entry in entries:
        text = texts.get(entry["description_md5"])
        if text is None or description_md5(text) != entry["description_md5"]:
            raise ValueError(f"{entry['package']}: no description with md5 {entry['description_md5']} in this "
                             "Translation-en (the archive has moved on: use the snapshot the manifest names)")
        out.append({"package": entry["package"], "split": split_of(entry["source"]), "text": plain_text(text),
                    "labels": entry["labels"]})
    return out


def index_texts(lists_dir):
    """``(files, {name: text})`` of the Packages and Translation-en indexes in an apt lists folder, fetched there
    with ``apt-get update`` when absent; ``files`` gives each file's name and sha256."""
    if not all(glob.glob(os.path.join(lists_dir, pattern)) for pattern in INDEXES.values()):
        os.makedirs(os.path.join(lists_dir, "partial"), exist_ok=True)
        subprocess.run(APT_UPDATE + ["-o", f"Dir::State::Lists={lists_dir}"], check=True)
    files, texts = {}, {}
    for name, pattern in INDEXES.items():
        path = sorted(glob.glob(os.path.join(lists_dir, pattern)))[0]
        with open(path, "rb") as f:
            files[name] = {"file": os.path.basename(path), "sha256": hashlib.sha256(f.read()).hexdigest()}
        texts[name] = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True,
                                     capture_output=True).stdout.decode("utf-8")
    return files, texts


def write_manifest(path, manifest):
    """Write the manifest as JSON (gzip when ``path`` ends in .gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)


def read_manifest(path):
    """The manifest written by `write_manifest`."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)
