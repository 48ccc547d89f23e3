"""Helpers for the safety tests: a folder's exact contents, to prove that nothing was changed."""
import hashlib
import os


def snapshot(folder):
    """``{relative path: sha256}`` of every file under ``folder`` (hidden ones included), plus its folders."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), folder) + "/"] = "folder"
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found
