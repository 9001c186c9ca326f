#!/usr/bin/env python3
"""A small word-level tokenizer with byte fallback, to make a token file for spillway.

spillway trains on token ids it does not make itself (data.source = "tokens"). This script
shows the workflow on the fortunes text without anything beyond Python's standard library:

  word_tokens.py build CORPUS PREFIX [--vocab 4096]  writes PREFIX.bin (uint16 ids, as
                                                     data.path wants them) and PREFIX.vocab.json
  word_tokens.py encode PREFIX TEXT                  prints TEXT's ids (for --prompt-ids)
  word_tokens.py decode PREFIX                       reads ids from stdin, prints the text

Ids 0-255 are the bytes themselves; ids from 256 are the commonest pieces of the corpus (a
run of letters, of digits or of other symbols, with the space before it). A piece outside
the vocabulary is written as its bytes, so every text encodes and decodes back exactly.
CORPUS is a file, or a directory read as spillway reads a text corpus: its regular files in
byte order of their paths, skipping *.dat and symbolic links.
"""
import argparse
import array
import collections
import json
import os
import re
import sys

PIECE = re.compile(rb" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")
BYTES = 256


def corpus_bytes(path):
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return f.read()
    files = []
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in names:
            full = os.path.join(root, name)
            if not name.endswith(".dat") and not os.path.islink(full) and os.path.isfile(full):
                files.append(full)
    if not files:
        sys.exit(f"word_tokens.py: {path} holds no text files")
    data = bytearray()
    for full in sorted(files, key=os.fsencode):
        with open(full, "rb") as f:
            data += f.read()
    return bytes(data)


def load_vocab(prefix):
    with open(prefix + ".vocab.json") as f:
        pieces = [p.encode("latin-1") for p in json.load(f)["pieces"]]
    return pieces, {p: BYTES + i for i, p in enumerate(pieces)}


def encode(text, ids_of):
    ids = []
    for piece in PIECE.findall(text):
        known = ids_of.get(piece)
        if known is not None:
            ids.append(known)
        else:
            ids.extend(piece)  # byte fallback
    return ids


def build(corpus, prefix, vocab):
    if not BYTES < vocab <= 65536:
        sys.exit(f"word_tokens.py: --vocab must lie in (256, 65536] for 2-byte ids, got {vocab}")
    text = corpus_bytes(corpus)
    counts = collections.Counter(PIECE.findall(text))
    # Single bytes have ids already; ties go by the piece's bytes, so a build is reproducible.
    ranked = sorted((p for p, n in counts.items() if len(p) > 1 and n > 1),
                    key=lambda p: (-counts[p], p))
    pieces = ranked[: vocab - BYTES]
    ids_of = {p: BYTES + i for i, p in enumerate(pieces)}
    ids = array.array("H", encode(text, ids_of))
    if sys.byteorder != "little":
        ids.byteswap()
    # Written to temporary names, then renamed: an interrupted build leaves no half file.
    with open(prefix + ".bin.tmp", "wb") as f:
        ids.tofile(f)
    with open(prefix + ".vocab.json.tmp", "w") as f:
        json.dump({"vocab": BYTES + len(pieces), "pieces": [p.decode("latin-1") for p in pieces]},
                  f)
    os.replace(prefix + ".bin.tmp", prefix + ".bin")
    os.replace(prefix + ".vocab.json.tmp", prefix + ".vocab.json")
    print(f"{prefix}.bin: {len(ids)} ids for {len(text)} bytes "
          f"({len(text) / len(ids):.2f} bytes an id), model.vocab = {BYTES + len(pieces)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("corpus")
    b.add_argument("prefix")
    b.add_argument("--vocab", type=int, default=4096)
    e = sub.add_parser("encode")
    e.add_argument("prefix")
    e.add_argument("text")
    d = sub.add_parser("decode")
    d.add_argument("prefix")
    args = parser.parse_args()
    if args.command == "build":
        build(args.corpus, args.prefix, args.vocab)
    elif args.command == "encode":
        _, ids_of = load_vocab(args.prefix)
        print(" ".join(str(i) for i in encode(args.text.encode(), ids_of)))
    else:
        pieces, _ = load_vocab(args.prefix)
        out = bytearray()
        for word in sys.stdin.read().replace(",", " ").split():
            i = int(word)
            out += bytes([i]) if i < BYTES else pieces[i - BYTES]
        sys.stdout.buffer.write(bytes(out))
        sys.stdout.buffer.write(b"\n")


if __name__ == "__main__":
    main()
