"""The multi-label study's pure parts on tiny control-file strings: labels from a ``Tag:`` field, the split rule,
the archive's description checksum, the corpus filter and the manifest round trip (no network)."""
import collections

import pytest

from studies import multilabel_corpus as corpus

PACKAGES = """Package: chess-a
Source: chess (1.0-1)
Version: 1.0-1
Tag: game::board, use::gameplaying, use::viewing:images,
 use::TODO
Description-md5: 368caa46e1989b6953da97fb4683c8ac

Package: chess-b
Source: chess
Version: 1.0-1
Tag: use::gameplaying
Description-md5: 368caa46e1989b6953da97fb4683c8ac

Package: edit
Version: 2
Tag: use::editing, use::viewing
Description-md5: 00000000000000000000000000000001

Package: untagged
Version: 3
Description-md5: 00000000000000000000000000000002
"""
TRANSLATIONS = """Package: chess-a
Description-md5: 368caa46e1989b6953da97fb4683c8ac
Description-en: Chess game
 A chess game.
 .
 With a board.

Package: edit
Description-md5: 00000000000000000000000000000001
Description-en: An editor
 It edits and views text files.

Package: untagged
Description-md5: 00000000000000000000000000000002
Description-en: Something
 With no tags at all here.
"""


def test_use_labels_cut_at_the_first_colon_without_todo_or_other_facets():
    tag = "role::program, use::viewing:images,\n use::editing, use::TODO, works-with::text, use::viewing"
    assert corpus.use_labels(tag) == ["editing", "viewing"]
    assert corpus.use_labels("") == []


@pytest.mark.parametrize("source, split", [("0ad", "train"), ("vim", "validation"), ("emacs", "test"),
                                           ("gnome-chess", "test")])
def test_split_pinned_by_sha256(source, split):
    # buckets from `printf NAME | sha256sum`: 0ad c3f71597 -> 39, vim 0f2ed9e3 -> 75, emacs 9dc34362 -> 82,
    # gnome-chess e137157c -> 80 (the first test bucket)
    assert corpus.split_of(source) == split


def test_split_shares_are_70_10_20():
    counts = collections.Counter(corpus.split_of(f"package-{i}") for i in range(20000))
    assert counts["train"] / 20000 == pytest.approx(0.70, abs=0.015)
    assert counts["validation"] / 20000 == pytest.approx(0.10, abs=0.01)
    assert counts["test"] / 20000 == pytest.approx(0.20, abs=0.015)


def test_description_checksum_and_plain_text():
    fields = {f["Package"]: f for f in corpus.stanzas(TRANSLATIONS)}
    description = fields["chess-a"]["Description-en"]
    assert description == "Chess game\n A chess game.\n .\n With a board."
    assert corpus.description_md5(description) == "368caa46e1989b6953da97fb4683c8ac"   # md5sum of it + "\n"
    assert corpus.plain_text(description) == "Chess game\n\nA chess game.\n\nWith a board."


def test_corpus_keeps_one_entry_per_description_and_frequent_labels(monkeypatch):
    monkeypatch.setattr(corpus, "MIN_WORDS", 4)
    monkeypatch.setattr(corpus, "MIN_DOCUMENTS", 2)
    entries = corpus.corpus_entries(PACKAGES, TRANSLATIONS)
    # chess-b repeats chess-a's description; untagged has no use:: tag; "viewing" is held by both kept
    # descriptions, "gameplaying" and "editing" by one each, so only "viewing" stays
    assert entries == [
        {"package": "chess-a", "source": "chess", "version": "1.0-1",
         "description_md5": "368caa46e1989b6953da97fb4683c8ac", "labels": ["viewing"]},
        {"package": "edit", "source": "edit", "version": "2",
         "description_md5": "00000000000000000000000000000001", "labels": ["viewing"]}]


@pytest.mark.parametrize("name", ["manifest.json", "manifest.json.gz"])
def test_manifest_round_trip_checks_each_text(tmp_path, name):
    entry = {"package": "chess-a", "source": "chess", "version": "1.0-1",
             "description_md5": "368caa46e1989b6953da97fb4683c8ac", "labels": ["gameplaying"]}
    path = str(tmp_path / name)
    corpus.write_manifest(path, {"entries": [entry]})
    entries = corpus.read_manifest(path)["entries"]
    assert entries == [entry]
    assert corpus.documents(entries, TRANSLATIONS) == [
        {"package": "chess-a", "split": "test",   # its source "chess": sha256 ac739dcc..., bucket 88
         "text": "Chess game\n\nA chess game.\n\nWith a board.", "labels": ["gameplaying"]}]
    changed = TRANSLATIONS.replace("With a board.", "With a new board.")
    with pytest.raises(ValueError, match="chess-a: no description with md5"):
        corpus.documents(entries, changed)
