"""How the shipped Wikipedia articles (`bert4long.pretrained.wikipedia_articles`) were made: the English Wikipedia
dump gensim ships as test data, every main-namespace page that is not a redirect and keeps more than 200 characters
after `strip_wiki_markup`. tests/cli/test_demo.py checks the shipped texts are this recipe's output, where gensim's
test data is installed (``pip install --no-deps gensim``).

    python -m benchmarks.make_wikipedia_articles   # prints the number of articles and whether they match
"""
import bz2
import html
import importlib.util
import os
import re

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
    """The 106 English Wikipedia articles of gensim's test data, markup stripped: the shipped file's texts."""
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


def main():
    from bert4long.pretrained import wikipedia_articles as shipped

    articles = wikipedia_articles()
    print(f"{len(articles)} articles from gensim's test data; the shipped file holds the same texts: "
          f"{articles == shipped()}")


if __name__ == "__main__":
    main()
