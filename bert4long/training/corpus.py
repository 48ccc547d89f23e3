"""Where the shipped Wikipedia articles (`bert4long.pretrained.wikipedia_articles`, what to read) come from:
gensim's test data, markup stripped by `strip_wiki_markup`; and the ones the built-in model never saw. Read your
own corpus with `bert4long.data.corpus.read_texts`."""
import bz2
import html
import importlib.util
import os
import re

WIKI_FILE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
# Indices into `wikipedia_articles()` of 13 held-out articles: neither the built-in model
# (bert4long/pretrained) nor ../shared/models/minilm-mlm trained on them; the main job and the
# position study measure on them.
HELD_OUT_ARTICLES = (5, 10, 13, 20, 27, 36, 37, 39, 65, 87, 88, 99, 103)
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


def strip_wiki_markup(text: str) -> str:
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


def wikipedia_articles() -> list[str]:
    """The 106 English Wikipedia articles of gensim's test data, markup stripped: the source of the shipped file."""
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
