"""Reading a pretraining corpus (a folder of ``.txt`` or a ``.jsonl``) and the built-in demo corpus."""
import bz2
import glob
import html
import importlib.util
import json
import os
import re


def read_corpus(path, text_key="text"):
    """Documents (strings) from a folder of ``.txt`` files (one document each) or a ``.jsonl`` file.

    Example:
    >>> from bert4long.training.corpus import read_corpus
    >>> docs = read_corpus("corpus/")  # doctest: +SKIP
    """
    if path is None or not os.path.exists(path):
        raise FileNotFoundError(f"Corpus not found: {path!r}. Pass --corpus FOLDER_OF_TXT or --corpus FILE.jsonl.")
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "**", "*.txt"), recursive=True))
        documents = [open(f, encoding="utf-8").read() for f in files]
    elif path.endswith(".jsonl"):
        documents = []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    record = json.loads(line)
                    if text_key not in record:
                        raise ValueError(f"{path}:{number} has no {text_key!r} field: each line must be "
                                         f'{{"{text_key}": "..."}}.')
                    documents.append(record[text_key])
    else:
        raise ValueError(f"Corpus {path!r} is neither a folder of .txt files nor a .jsonl file.")
    documents = [d for d in documents if d.strip()]
    if not documents:
        raise ValueError(f"Corpus {path!r} holds no text (no non-empty .txt file / jsonl line): add documents to it.")
    return documents


WIKI_FILE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
_MARKUP = [
    (re.compile(r"<!--.*?-->", re.S), " "),
    (re.compile(r"<ref[^>]*/>|<ref.*?</ref>", re.S), " "),
    (re.compile(r"\{\|.*?\|\}", re.S), " "),          # tables
    (re.compile(r"\[\[(?:File|Image|Category):[^\]]*\]\]"), " "),
]
_NESTED_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_LINK = re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]")
_EXTERNAL = re.compile(r"\[https?://\S+ ?([^\]]*)\]")
_TAGS = re.compile(r"<[^>]+>")
_FORMAT = re.compile(r"'{2,}|^[=*#:;]+|=+\s*$", re.M)


def strip_wiki_markup(text):
    """Plain text from MediaWiki markup (templates, links, tables, refs, formatting removed)."""
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    previous = None
    while previous != text:
        previous, text = text, _NESTED_TEMPLATE.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _EXTERNAL.sub(r"\1", text)
    text = _TAGS.sub(" ", text)
    text = _FORMAT.sub("", text)
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&amp;", "&"), ("&nbsp;", " ")):
        text = text.replace(entity, char)
    return re.sub(r"[ \t]+", " ", re.sub(r"\n{2,}", "\n", text)).strip()


def wikipedia_articles():
    """The 106 English Wikipedia articles shipped in gensim's test data, markup stripped."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("The demo corpus comes from gensim's test data: pip install --no-deps gensim")
    path = os.path.join(spec.submodule_search_locations[0], WIKI_FILE)
    with bz2.open(path, "rt", encoding="utf-8") as f:
        xml = f.read()
    articles = []
    for page in re.findall(r"<page>(.*?)</page>", xml, re.S):
        if re.search(r"<ns>0</ns>", page) is None:
            continue
        body = re.search(r"<text[^>]*>(.*?)</text>", page, re.S)
        if body is None or body.group(1).lstrip().lower().startswith("#redirect"):
            continue
        text = strip_wiki_markup(html.unescape(body.group(1)))
        if len(text) > 200:
            articles.append(text)
    return articles
