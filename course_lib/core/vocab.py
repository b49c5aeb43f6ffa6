"""The corpus's closed vocabulary: the word lists the generator draws from, and a word-level
tokenizer over them (``Vocab``). The rules that turn these words into labels are in
``course_lib.core.data``.
"""
from __future__ import annotations

PAD, UNK = "<pad>", "<unk>"

POSITIVE = {"good": 1, "nice": 1, "fine": 1, "solid": 1, "pleasant": 1, "decent": 1,
            "handy": 1, "comfortable": 1, "reliable": 1, "clean": 1,
            "great": 2, "excellent": 2, "superb": 2, "wonderful": 2, "amazing": 2,
            "perfect": 2, "brilliant": 2, "fantastic": 2}
NEGATIVE = {"bad": -1, "poor": -1, "dull": -1, "flimsy": -1, "noisy": -1, "slow": -1,
            "cheap": -1, "awkward": -1, "weak": -1, "messy": -1,
            "awful": -2, "terrible": -2, "horrible": -2, "useless": -2, "broken": -2,
            "dreadful": -2, "pathetic": -2, "disgusting": -2}
INTENSIFIERS = ("very", "really", "extremely", "truly", "incredibly", "so")
NEGATORS = ("not", "never", "hardly")
OPENERS = (("i", "do", "n't", "think"), ("nobody", "would", "say"),
           ("i", "would", "not", "call"), ("it", "is", "false", "that"))
NOUNS = ("battery", "screen", "price", "design", "sound", "camera", "keyboard", "case",
         "charger", "manual", "delivery", "packaging", "support", "software", "speaker",
         "strap", "lid", "handle", "cable", "app", "fan", "motor", "lens", "button")
FILLER = (("i", "bought", "this", "for", "my", "sister", "last", "month"),
          ("it", "arrived", "on", "a", "tuesday", "in", "a", "box"),
          ("we", "use", "it", "every", "day", "at", "home"),
          ("the", "colour", "is", "blue", "and", "the", "size", "is", "medium"),
          ("my", "friend", "has", "the", "older", "model"),
          ("it", "came", "with", "two", "spare", "parts"),
          ("i", "had", "to", "read", "the", "instructions", "twice"),
          ("we", "took", "it", "on", "holiday", "to", "the", "coast"),
          ("the", "shop", "was", "near", "the", "station"),
          ("it", "replaced", "an", "old", "one", "from", "a", "different", "brand"),
          ("my", "kids", "played", "with", "it", "all", "weekend"),
          ("i", "ordered", "it", "online", "after", "reading", "some", "reviews"))
PUNCT = (".", "!")


def build_vocab() -> list[str]:
    """Every word the generator can emit, in a fixed order (index 0 is padding)."""
    words: list[str] = []
    groups = [list(POSITIVE), list(NEGATIVE), INTENSIFIERS, NEGATORS, NOUNS, PUNCT,
              ["the", "is", "was", "but", "and", "overall", "this", "one", "feels"]]
    groups += [list(o) for o in OPENERS] + [list(f) for f in FILLER]
    for group in groups:
        for word in group:
            if word not in words:
                words.append(word)
    return [PAD, UNK] + words


class Vocab:
    """A word-level tokenizer over a closed vocabulary: text <-> token ids."""

    def __init__(self, words: list[str]):
        if len(set(words)) != len(words):
            raise ValueError("words: the vocabulary has duplicates")
        self.itos = list(words)
        self.stoi = {w: i for i, w in enumerate(words)}
        self.pad_id = self.stoi[PAD]
        self.unk_id = self.stoi[UNK]

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(w, self.unk_id) for w in text.split()]

    def decode(self, ids) -> str:
        return " ".join(self.itos[int(i)] for i in ids if int(i) != self.pad_id)
