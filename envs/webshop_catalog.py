"""WebShop's products and shopping goals: a seeded generator sized for a CPU, and a loader for the original files.

A Product is what the shop's pages show and the reward reads; a Goal is one shopping instruction with what the
reward checks (the attributes and options asked for, the price limit, and the wanted product's title, query and
category for r_type). Goals are put in the original order (shuffled with seed 233) and split by index: the first
`test_goals` are the test split, the next `val_goals` validation, the rest training (the original WebShop split,
which MEM1's code uses: goals 0-499 test). MEM1's paper text gives 1000/500 instead; pass test_goals=1000,
val_goals=500 for that.

Generated catalogs (`generate_catalog`) draw products of twenty types in WebShop's five categories (beauty, food,
fashion, home, electronics), each with attributes from its type's pool, option groups (colour, size, flavour ...),
a price or price range, bullet points, a description and reviews, and `goals_per_product` goals per product written
from the original's synthetic template ("i need <attributes> <type> with <group>: <value>, and price lower than
<limit> dollars"). Products of one type share words, so a search returns several and the agent must read titles,
options and features to pick the one the goal describes.

`load_catalog(data_dir)` reads the original files: items_shuffle_1000.json (or items_shuffle.json), items_ins_v2_1000
.json (or items_ins_v2.json), items_human_ins.json and, with read_reviews, reviews.json, with the original engine's
rules (ids longer than 10 characters or 'nan' dropped, options lower-cased with '/' as ' | ', attributes from
items_ins_v2 as they are, an empty list included, or ['DUMMY_ATTR'] for a product it does not list, a price drawn in
a product's price range, human goals without attributes skipped). Like the original engine it ignores reviews.json
unless asked (`read_reviews=True`).
"""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

PRICE_GRID = tuple(10.0 * i for i in range(1, 100))
"""Price limits a goal may get: the 10-dollar grid; a goal's limit is the larger of two drawn from the first four
grid values above its product's price (no limit when fewer than two are left)."""
NO_PRICE_LIMIT = 1_000_000.0
"""The original's limit for a goal whose product costs more than the grid reaches."""
GOAL_SEED = 233
"""The original shuffles its goals with this seed before splitting them."""


@dataclass
class Review:
    title: str
    score: int
    body: str


@dataclass
class Product:
    """One product as the pages show it and the reward reads it."""

    asin: str
    """Upper-case product id, shown on result pages (clicked lower-case)."""
    title: str
    category: str
    """Top-level category (beauty, food, fashion, home, electronics in generated catalogs)."""
    query: str
    """The search query the product was collected under; equal queries give r_type 1."""
    product_category: str
    """Category path with '›' between levels; two shared levels give r_type 1."""
    price: float
    """The price paid (drawn once in the price range when there is one)."""
    price_tag: str
    """How the page shows the price: '$12.99' or '$10.0 to $20.0'."""
    options: dict[str, list[str]] = field(default_factory=dict)
    """Option groups (lower-case names) and their lower-case values, in page order."""
    attributes: list[str] = field(default_factory=list)
    bullet_points: list[str] = field(default_factory=list)
    """The 'features' sub-page."""
    description: str = ""
    reviews: list[Review] = field(default_factory=list)
    rating: str = "N.A."


@dataclass
class Goal:
    """One shopping instruction and what the reward checks."""

    asin: str
    """The product the goal was written for."""
    instruction_text: str
    attributes: list[str]
    goal_options: dict[str, str] | list[str]
    """Options asked for: {group: value} in generated goals, a list of values in the original human goals."""
    price_upper: float
    name: str
    """The goal product's title (r_type compares its nouns)."""
    query: str
    category: str
    product_category: str


@dataclass
class Catalog:
    """Products and goals in the original goal order; `split(name)` gives one split's goals."""

    products: list[Product]
    goals: list[Goal]
    test_goals: int = 500
    """The first this many goals are the test split."""
    val_goals: int = 1000
    """The next this many are the validation split; the rest are the training split."""

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}
        if len(self.by_asin) != len(self.products):
            raise ValueError("Catalog: product ids (asin) must be unique")
        missing = sorted({g.asin for g in self.goals} - set(self.by_asin))
        if missing:
            raise ValueError(f"Catalog: goals name products that are not in the catalog: {missing[:5]}")
        for name in ("test_goals", "val_goals"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Catalog.{name} must be an int >= 0, got {value!r}")

    def split(self, name: str) -> list[Goal]:
        """The goals of split 'test', 'val', 'train' or 'all'."""
        bounds = {"test": (0, self.test_goals), "val": (self.test_goals, self.test_goals + self.val_goals),
                  "train": (self.test_goals + self.val_goals, None), "all": (0, None)}
        if name not in bounds:
            raise ValueError(f"WebShop split must be one of {sorted(bounds)}, got {name!r}")
        start, stop = bounds[name]
        return self.goals[start:stop]


# -- shared rules ------------------------------------------------------------------------------------------------
def price_limit(price: float, rng: random.Random) -> tuple[float, str]:
    """(limit, instruction suffix) for a goal whose product costs `price` (see PRICE_GRID)."""
    above = [p for p in PRICE_GRID if p > price][:4]
    if len(above) < 2:
        return NO_PRICE_LIMIT, ""
    upper = sorted(rng.sample(above, 2))[1]
    return upper, f", and price lower than {upper:.2f} dollars"


def shuffle_goals(goals: list[Goal]) -> list[Goal]:
    """The original goal order: the same permutation as `random.seed(233); random.shuffle(goals)`."""
    goals = list(goals)
    random.Random(GOAL_SEED).shuffle(goals)
    return goals


# -- generated catalog -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProductType:
    name: str
    """Noun phrase in titles and instructions."""
    category: str
    path: str
    """Category path below the top level, '›'-separated."""
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    prices: tuple[float, float]


_COLORS = ("black", "white", "grey", "navy blue", "red", "olive green", "pink", "beige")
_SIZES = ("small", "medium", "large", "x-large")
TYPES = (
    ProductType("shampoo", "beauty", "Hair Care › Shampoo & Conditioner",
                ("sulfate free", "paraben free", "tea tree oil", "color safe", "dry hair", "argan oil"),
                {"size": ("8.4 fl oz", "16.9 fl oz", "33.8 fl oz"), "scent": ("lavender", "coconut", "mint")},
                (6, 35)),
    ProductType("face moisturizer", "beauty", "Skin Care › Face › Moisturizers",
                ("fragrance free", "sensitive skin", "hyaluronic acid", "oil free", "vegan", "spf 30"),
                {"size": ("1.7 oz", "3.4 oz")}, (8, 60)),
    ProductType("lip balm", "beauty", "Skin Care › Lip Care › Balms",
                ("shea butter", "long lasting", "cruelty free", "spf 15", "beeswax"),
                {"flavor": ("mint", "vanilla", "cherry", "honey"), "size": ("pack of 2", "pack of 4", "pack of 6")},
                (3, 20)),
    ProductType("hair brush", "beauty", "Hair Care › Styling Tools › Brushes",
                ("detangling", "curly hair", "boar bristle", "anti static", "travel size"),
                {"color": ("black", "pink", "walnut")}, (5, 30)),
    ProductType("trail mix", "food", "Snacks › Nuts & Seeds › Trail Mix",
                ("gluten free", "high protein", "non gmo", "low sugar", "individually wrapped", "kosher"),
                {"flavor": ("dark chocolate", "sea salt", "honey roasted"), "size": ("pack of 6", "pack of 12")},
                (8, 45)),
    ProductType("green tea", "food", "Beverages › Tea › Green Tea",
                ("usda organic", "sugar free", "non gmo", "individually wrapped", "keto friendly"),
                {"flavor": ("jasmine", "lemon", "peach", "ginger"), "size": ("20 count", "50 count", "100 count")},
                (5, 30)),
    ProductType("protein bar", "food", "Snacks › Bars › Protein Bars",
                ("gluten free", "low carb", "keto friendly", "plant based", "nut free"),
                {"flavor": ("peanut butter", "chocolate chip", "cookie dough", "berry"),
                 "size": ("pack of 12", "pack of 24")}, (15, 50)),
    ProductType("olive oil", "food", "Pantry › Oils › Olive Oil",
                ("extra virgin", "cold pressed", "non gmo", "kosher", "glass bottle"),
                {"size": ("16.9 fl oz", "25.3 fl oz", "101 fl oz")}, (8, 60)),
    ProductType("running shoes", "fashion", "Men › Shoes › Athletic › Running",
                ("non slip", "lightweight", "memory foam", "breathable mesh", "rubber sole", "arch support"),
                {"color": _COLORS[:5], "size": ("7", "8", "9", "10", "11")}, (25, 120)),
    ProductType("crew neck shirt", "fashion", "Men › Clothing › Shirts",
                ("machine washable", "slim fit", "short sleeve", "cotton blend", "moisture wicking"),
                {"color": _COLORS, "size": _SIZES}, (8, 35)),
    ProductType("rain jacket", "fashion", "Women › Clothing › Coats & Jackets",
                ("waterproof", "hooded", "packable", "zip pockets", "windproof"),
                {"color": _COLORS[:6], "size": _SIZES}, (30, 150)),
    ProductType("wool socks", "fashion", "Women › Clothing › Socks & Hosiery",
                ("moisture wicking", "cushioned", "merino wool", "machine washable", "anti blister"),
                {"color": ("black", "grey", "beige"), "size": ("medium", "large")}, (10, 35)),
    ProductType("pillow cover", "home", "Home & Kitchen › Bedding › Decorative Pillows",
                ("hand painted", "machine washable", "double sided", "hidden zipper", "linen blend"),
                {"color": _COLORS[3:], "size": ("16x16 inch", "18x18 inch", "20x20 inch")}, (8, 30)),
    ProductType("office chair", "home", "Home & Kitchen › Furniture › Home Office Chairs",
                ("lumbar support", "adjustable height", "easy assembly", "mesh back", "swivel wheels"),
                {"color": ("black", "grey", "white")}, (60, 300)),
    ProductType("bookshelf", "home", "Home & Kitchen › Furniture › Bookcases",
                ("solid wood", "easy assembly", "5 tier", "space saving", "industrial style"),
                {"color": ("walnut", "white", "black", "espresso")}, (40, 200)),
    ProductType("bath towel", "home", "Home & Kitchen › Bath › Towels",
                ("quick dry", "extra absorbent", "100% cotton", "machine washable", "hotel quality"),
                {"color": _COLORS[1:6], "size": ("set of 2", "set of 4", "set of 6")}, (15, 70)),
    ProductType("bluetooth speaker", "electronics", "Electronics › Portable Audio › Speakers",
                ("waterproof", "long battery life", "built in microphone", "bass boost", "shockproof"),
                {"color": ("black", "navy blue", "red")}, (20, 120)),
    ProductType("phone charger", "electronics", "Electronics › Cell Phones › Chargers",
                ("fast charging", "usb c", "dual port", "foldable plug", "overheat protection"),
                {"size": ("3 ft cable", "6 ft cable", "10 ft cable"), "color": ("black", "white")}, (8, 35)),
    ProductType("wireless earbuds", "electronics", "Electronics › Headphones › Earbuds",
                ("noise cancelling", "charging case", "sweat resistant", "touch control", "long battery life"),
                {"color": ("black", "white", "navy blue")}, (20, 150)),
    ProductType("hdmi cable", "electronics", "Electronics › Accessories › Cables",
                ("4k", "high speed", "gold plated", "braided", "ethernet"),
                {"size": ("3 ft", "6 ft", "10 ft", "15 ft"), "item count": ("1 pack", "2 pack")}, (6, 30)),
)
"""The generated catalog's product types: attribute pools, option groups and price ranges."""
_TOP = {"beauty": "Beauty & Personal Care", "food": "Grocery & Gourmet Food", "fashion": "Clothing, Shoes & Jewelry",
        "home": "Home & Kitchen", "electronics": "Electronics"}
BRANDS = ("Aurelle", "Brightvale", "Corvane", "Dunmore", "Elmsley", "Fernwick", "Glenhaven", "Harlow", "Ivorra",
          "Kestrel", "Lumio", "Marlowe", "Northby", "Orrin", "Pellham", "Quill", "Rowan", "Sable", "Tamsin", "Verity")
_REVIEWS = (("Exactly as described", 5, "Works well and arrived on time."),
            ("Good value", 4, "Does what it says, would buy again."),
            ("Just okay", 3, "Fine for the price but nothing special."),
            ("Love it", 5, "Better than the one I had before."))


def _asin(rng: random.Random) -> str:
    return "B0" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=8))


def _product(kind: ProductType, asin: str, rng: random.Random) -> Product:
    attributes = rng.sample(kind.attributes, rng.randint(2, min(4, len(kind.attributes))))
    shown = attributes[: rng.randint(1, 2)]
    title = " ".join([rng.choice(BRANDS), *(a.title() for a in shown), kind.name.title()])
    options = {}
    for group, values in kind.options.items():
        kept = set(rng.sample(values, rng.randint(min(2, len(values)), len(values))))
        options[group] = [v for v in values if v in kept]
    low, high = kind.prices
    if rng.random() < 0.3:
        a, b = sorted(round(rng.uniform(low, high), 2) for _ in range(2))
        pricing, tag = [a, b], f"${a} to ${b}"
    else:
        a = round(rng.uniform(low, high), 2)
        pricing, tag = [a], f"${a}"
    reviews = [Review(*r) for r in rng.sample(_REVIEWS, rng.randint(0, 3))]
    rating = f"{sum(r.score for r in reviews) / len(reviews):.1f}" if reviews else "N.A."
    return Product(
        asin=asin, title=title, category=kind.category, query=kind.name,
        product_category=f"{_TOP[kind.category]} › {kind.path}",
        price=round(rng.uniform(*pricing), 2) if len(pricing) == 2 else pricing[0], price_tag=tag,
        options=options, attributes=attributes,
        bullet_points=[f"{a.capitalize()}: made for everyday use." for a in attributes],
        description=f"This {kind.name} is {attributes[0]}. Designed for comfort and value.",
        reviews=reviews, rating=rating)


def _goal(product: Product, kind: ProductType, rng: random.Random) -> Goal:
    attributes = rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes))))
    options = {group: rng.choice(values) for group, values in product.options.items()}
    upper, price_text = price_limit(product.price, rng)
    article = "an" if attributes[0][0] in "aeiou" else "a"
    wants = " and ".join([", ".join(attributes[:-1]), attributes[-1]] if len(attributes) > 1 else attributes)
    option_text = " with " + ", and ".join(f"{k}: {v}" for k, v in options.items()) if options else ""
    return Goal(asin=product.asin, instruction_text=f"i need {article} {wants} {kind.name}{option_text}{price_text}",
                attributes=attributes, goal_options=options, price_upper=upper, name=product.title,
                query=product.query, category=product.category, product_category=product.product_category)


def generate_catalog(num_products: int = 400, goals_per_product: int = 5, seed: int = 0, test_goals: int = 500,
                     val_goals: int = 500) -> Catalog:
    """A seeded catalog: `num_products` products spread over TYPES, `goals_per_product` goals each, in the
    original goal order (see the module docstring)."""
    for name, value, low in (("num_products", num_products, 1), ("goals_per_product", goals_per_product, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"generate_catalog: {name} must be an int >= {low}, got {value!r}")
    rng = random.Random(f"webshop-catalog-{seed}")
    asins: set[str] = set()
    products, goals = [], []
    for i in range(num_products):
        kind = TYPES[i % len(TYPES)]
        asin = _asin(rng)
        while asin in asins:
            asin = _asin(rng)
        asins.add(asin)
        product = _product(kind, asin, rng)
        products.append(product)
        goals += [_goal(product, kind, rng) for _ in range(goals_per_product)]
    rng.shuffle(products)  # search ties and pages do not follow the type order
    return Catalog(products, shuffle_goals(goals), test_goals, val_goals)


# -- original files ----------------------------------------------------------------------------------------------
def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"WebShop data: cannot read {path}: {e}") from e


def _first(data_dir: Path, names: tuple[str, ...], required: bool = True) -> Path | None:
    for name in names:
        if (data_dir / name).is_file():
            return data_dir / name
    if required:
        raise ValueError(f"WebShop data: {data_dir} has none of {list(names)}")
    return None


def _need(row, key: str, path: Path, where: str):
    if not isinstance(row, dict) or key not in row:
        raise ValueError(f"WebShop data: {path}: {where} has no key {key!r}")
    return row[key]


def _pricing(text) -> tuple[list[float], str]:
    values = [float(re.sub(r"[^\d.]", "", part) or "nan") for part in str(text or "").split("$")[1:]]
    values = [v for v in values if v == v]
    if not values:
        return [100.0], "$100.0"
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def _attributes(entry) -> list[str]:
    # The original keeps a product's attribute list as it is, empty included; only a product without one gets
    # the placeholder.
    if isinstance(entry, dict) and "attributes" in entry:
        return list(entry["attributes"] or [])
    return ["DUMMY_ATTR"]


def load_catalog(data_dir: str | Path, num_products: int | None = None, seed: int = 0, test_goals: int = 500,
                 val_goals: int = 1000, read_reviews: bool = False) -> Catalog:
    """The original WebShop files in `data_dir` as a Catalog with the human goals (see the module docstring).
    `num_products` keeps the first that many rows of the items file, as the original does; `seed` draws the price
    of products with a price range and the goals' price limits; `read_reviews` reads reviews.json, which the
    original engine never does (its products have no reviews and the rating "N.A.")."""
    data_dir = Path(data_dir)
    items_path = _first(data_dir, ("items_shuffle_1000.json", "items_shuffle.json"))
    attrs_path = _first(data_dir, ("items_ins_v2_1000.json", "items_ins_v2.json"))
    human_path = _first(data_dir, ("items_human_ins.json",))
    reviews_path = _first(data_dir, ("reviews.json",), required=False) if read_reviews else None
    items, attrs, human = _read_json(items_path), _read_json(attrs_path), _read_json(human_path)
    for path, data, kind in ((items_path, items, list), (attrs_path, attrs, dict), (human_path, human, dict)):
        if not isinstance(data, kind):
            raise ValueError(f"WebShop data: {path} must hold a JSON {kind.__name__}, got {type(data).__name__}")
    reviews: dict[str, tuple[list[Review], str]] = {}
    if reviews_path is not None:
        for i, row in enumerate(_read_json(reviews_path)):
            asin = _need(row, "asin", reviews_path, f"row {i}")
            listed = [Review(str(r.get("title", "")), int(float(r.get("score", r.get("stars", 0)) or 0)),
                             str(r.get("body", r.get("review", "")))) for r in row.get("reviews") or []]
            reviews[asin] = (listed, str(row.get("average_rating", "N.A.")))
    rng = random.Random(f"webshop-prices-{seed}")
    products, goals, seen = [], [], set()
    for i, row in enumerate(items[:num_products] if num_products is not None else items):
        asin = str(_need(row, "asin", items_path, f"row {i}"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        where = f"row {i} (asin {asin})"
        pricing, tag = _pricing(row.get("pricing"))
        options = {}
        for group, values in (row.get("customization_options") or {}).items():
            if values is None:
                continue
            options[group.lower()] = [str(_need(v, "value", items_path, f"{where} option {group!r}")).strip()
                                      .replace("/", " | ").lower() for v in values]
        small = _need(row, "small_description", items_path, where)
        listed, rating = reviews.get(asin, ([], "N.A."))
        product = Product(
            asin=asin, title=str(_need(row, "name", items_path, where)),
            category=str(_need(row, "category", items_path, where)),
            query=str(_need(row, "query", items_path, where)).lower().strip(),
            product_category=str(_need(row, "product_category", items_path, where)),
            price=rng.uniform(*pricing) if len(pricing) == 2 else pricing[0], price_tag=tag, options=options,
            attributes=_attributes(attrs.get(asin)),
            bullet_points=list(small) if isinstance(small, list) else [str(small)],
            description=str(_need(row, "full_description", items_path, where) or ""), reviews=listed, rating=rating)
        products.append(product)
        for j, ins in enumerate(human.get(asin) or []):
            at = f"{asin} instruction {j}"
            attributes = _need(ins, "instruction_attributes", human_path, at)
            if not attributes:
                continue  # the original skips goals without attributes
            upper, price_text = price_limit(product.price, rng)
            goals.append(Goal(
                asin=asin, instruction_text=str(_need(ins, "instruction", human_path, at)).strip(".") + price_text,
                attributes=list(attributes), goal_options=_need(ins, "instruction_options", human_path, at),
                price_upper=upper, name=product.title, query=product.query, category=product.category,
                product_category=product.product_category))
    return Catalog(products, shuffle_goals(goals), test_goals, val_goals)
