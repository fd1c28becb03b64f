"""The demo model's caption grammar, palette, layout and held-out rule: one
place that make_data.py (which draws), classify.py (which checks) and the
training scripts read.

    a {size} {color} {shape} {position} [and a {size} {color} {shape} {position}]
      on a {background} background

(issue 40; English article before the background: "on an orange background").
"""
import random

SIZES = ("small", "large")
# Palette: the colours a caption can name, as drawn (before the mild shade
# jitter) and as classify.py snaps a mean colour to. Pairwise distances are
# >= 98 in RGB, >= 75 after a +-10 % shade jitter of both, and the
# jitter never changes the nearest entry.
PALETTE = {
    "red": (215, 35, 35),
    "green": (40, 165, 60),
    "blue": (40, 80, 215),
    "yellow": (245, 225, 40),
    "white": (240, 240, 240),
    "black": (25, 25, 25),
    "purple": (135, 55, 180),
    "orange": (250, 125, 20),
}
COLORS = tuple(PALETTE)
SHAPES = ("circle", "square", "triangle")
POSITIONS = ("on the left", "on the right", "at the top", "at the bottom", "in the center")
# Where an object of each position is centred, as (x, y) fractions of the side
# (y grows downwards, as in the picture).
ANCHORS = {
    "on the left": (0.25, 0.5),
    "on the right": (0.75, 0.5),
    "at the top": (0.5, 0.25),
    "at the bottom": (0.5, 0.75),
    "in the center": (0.5, 0.5),
}
# A two-object scene never uses "in the center": a centred object of either
# size would touch one at the left/right/top/bottom anchor, and the classifier
# could not tell their pixels apart.
PAIR_POSITIONS = POSITIONS[:4]


def held_out(color, shape, position):
    """The held-out (colour, shape, position) triples: for colour index c and
    shape index s, the position with index (c + 2 s) mod 5. That is 8 x 3 = 24
    triples, one per (colour, shape); each (colour, position) pair keeps at
    least two shapes and each (colour, shape) four positions in training."""
    c, s, p = COLORS.index(color), SHAPES.index(shape), POSITIONS.index(position)
    return p == (c + 2 * s) % 5


HELD_OUT = [(c, s, POSITIONS[(ci + 2 * si) % 5])
            for ci, c in enumerate(COLORS) for si, s in enumerate(SHAPES)]


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def caption(scene):
    """scene: {"background": colour, "objects": [{size, color, shape, position}, ...]}."""
    objs = [f"a {o['size']} {o['color']} {o['shape']} {o['position']}" for o in scene["objects"]]
    bg = scene["background"]
    return f"{' and '.join(objs)} on {article(bg)} {bg} background"


def random_object(rnd, position, forbid_colors=(), allow_held_out=False):
    while True:
        o = {"size": rnd.choice(SIZES), "color": rnd.choice(COLORS),
             "shape": rnd.choice(SHAPES), "position": position}
        if o["color"] in forbid_colors:
            continue
        if not allow_held_out and held_out(o["color"], o["shape"], o["position"]):
            continue
        return o


def random_scene(rnd, two_objects):
    """A training scene: no object is a held-out triple."""
    bg = rnd.choice(COLORS)
    if two_objects:
        p1, p2 = rnd.sample(PAIR_POSITIONS, 2)
        objs = [random_object(rnd, p1, (bg,)), random_object(rnd, p2, (bg,))]
    else:
        objs = [random_object(rnd, rnd.choice(POSITIONS), (bg,))]
    return {"background": bg, "objects": objs}


def vocabulary_sentences():
    """Sentences for the SentencePiece trainer: captions of the grammar and as
    many random strings of its words. The captions alone are too few distinct
    sentences: the unigram trainer then stops at 47 pieces, most words split."""
    rnd = random.Random(5)
    captions = [caption(random_scene(rnd, rnd.random() < 0.5)) for _ in range(4000)]
    words = sorted({w for c in captions for w in c.split()})
    return captions + [" ".join(rnd.choice(words) for _ in range(rnd.randint(3, 14)))
                       for _ in range(4000)]
