import json
import random

import pytest

from memrl_envs.webshop_catalog import (
    NO_PRICE_LIMIT,
    PRICE_GRID,
    Catalog,
    generate_catalog,
    load_catalog,
    price_limit,
    shuffle_goals,
)


def test_generated_catalog_is_seeded_and_split_by_goal_index():
    a, b = generate_catalog(60, 3, seed=1, test_goals=50, val_goals=40), generate_catalog(60, 3, seed=1,
                                                                                          test_goals=50, val_goals=40)
    assert [g.instruction_text for g in a.goals] == [g.instruction_text for g in b.goals]
    assert [g.instruction_text for g in generate_catalog(60, 3, seed=2).goals] != [g.instruction_text for g in a.goals]
    assert len(a.products) == 60 and len(a.goals) == 180
    assert (len(a.split("test")), len(a.split("val")), len(a.split("train")), len(a.split("all"))) == (50, 40, 90, 180)
    assert a.split("test") + a.split("val") + a.split("train") == a.goals
    with pytest.raises(ValueError, match="split must be one of"):
        a.split("dev")


def test_generated_goals_ask_for_what_their_product_has():
    catalog = generate_catalog(40, 2, seed=0)
    for goal in catalog.goals:
        product = catalog.by_asin[goal.asin]
        assert set(goal.attributes) <= set(product.attributes) and 1 <= len(goal.attributes) <= 3
        assert all(goal.goal_options[g] in product.options[g] for g in product.options)
        assert goal.instruction_text.startswith("i need") and goal.query in goal.instruction_text
        assert goal.price_upper > product.price
        assert product.asin.startswith("B0") and len(product.asin) == 10 and product.asin == product.asin.upper()


def test_price_limits_come_from_the_grid_just_above_the_price():
    rng = random.Random(0)
    for price in (0.5, 12.34, 49.99, 977.0):
        upper, text = price_limit(price, rng)
        above = [p for p in PRICE_GRID if p > price][:4]
        assert upper in above[1:] and text == f", and price lower than {upper:.2f} dollars"
    assert price_limit(985.0, rng) == (NO_PRICE_LIMIT, "")  # one grid value left above it


def test_goal_order_is_the_originals_seed_233_shuffle():
    items = list(range(1000))
    expected = list(items)
    random.seed(233)
    random.shuffle(expected)
    assert shuffle_goals(items) == expected


def _write_original(tmp_path, items=None, attrs=None, human=None, reviews=None):
    items = items if items is not None else [
        {"asin": "B000000001", "name": "Kestrel Trail Running Shoes", "full_description": "Light shoes.",
         "small_description": ["Rubber sole", "Mesh upper"], "pricing": "$39.99",
         "customization_options": {"Color": [{"value": "Navy/Blue", "image": "x.jpg"}, {"value": "Black",
                                                                                         "image": None}],
                                   "Size": None},
         "category": "fashion", "query": " Running Shoes ", "product_category": "Clothing › Shoes › Running",
         "images": ["x.jpg"]},
        {"asin": "B000000002", "name": "Quill Green Tea", "full_description": "Tea.", "small_description": "Loose",
         "pricing": "$7.49 - $12.99", "customization_options": {}, "category": "food", "query": "green tea",
         "product_category": "Grocery › Tea", "images": ["y.jpg"]},
        {"asin": "nan", "name": "bad", "full_description": "", "small_description": "", "pricing": "",
         "customization_options": {}, "category": "", "query": "", "product_category": "", "images": [""]},
        {"asin": "B000000000001", "name": "too long", "full_description": "", "small_description": "",
         "pricing": "", "customization_options": {}, "category": "", "query": "", "product_category": "",
         "images": [""]},
    ]
    attrs = attrs if attrs is not None else {"B000000001": {"attributes": ["rubber sole", "non slip"],
                                                            "instruction": "x", "instruction_attributes": ["x"]}}
    human = human if human is not None else {
        "B000000001": [{"instruction": "i want navy running shoes.", "instruction_attributes": ["rubber sole"],
                        "instruction_options": ["navy | blue"]},
                       {"instruction": "no attributes", "instruction_attributes": [], "instruction_options": []}],
        "B000000002": [{"instruction": "i need loose green tea", "instruction_attributes": ["loose"],
                        "instruction_options": []}]}
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(items))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(attrs))
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    if reviews is not None:
        (tmp_path / "reviews.json").write_text(json.dumps(reviews))
    return tmp_path


def test_the_original_files_load_with_the_engines_rules(tmp_path):
    reviews = [{"asin": "B000000001", "average_rating": 4.5,
                "reviews": [{"title": "Great", "stars": 5, "review": "Fits well."}]}]
    catalog = load_catalog(_write_original(tmp_path, reviews=reviews), test_goals=1, val_goals=0, read_reviews=True)
    assert [p.asin for p in catalog.products] == ["B000000001", "B000000002"]  # 'nan' and 11+ characters dropped
    shoes, tea = catalog.products
    assert shoes.options == {"color": ["navy | blue", "black"]}  # lower-cased, '/' as ' | ', None groups dropped
    assert shoes.query == "running shoes" and shoes.bullet_points == ["Rubber sole", "Mesh upper"]
    assert shoes.price == 39.99 and shoes.price_tag == "$39.99"
    assert shoes.reviews[0].score == 5 and shoes.reviews[0].body == "Fits well." and shoes.rating == "4.5"
    assert tea.price_tag == "$7.49 to $12.99" and 7.49 <= tea.price <= 12.99
    assert tea.attributes == ["DUMMY_ATTR"] and tea.bullet_points == ["Loose"] and tea.rating == "N.A."
    # Human goals: the one without attributes is skipped; a price limit is appended; the original order.
    assert len(catalog.goals) == 2
    texts = {g.asin: g.instruction_text for g in catalog.goals}
    assert texts["B000000001"].startswith("i want navy running shoes, and price lower than ")
    assert [g.asin for g in catalog.goals] == [g.asin for g in shuffle_goals(
        [g for asin in ("B000000001", "B000000002") for g in catalog.goals if g.asin == asin])]
    assert len(catalog.split("test")) == 1 and len(catalog.split("train")) == 1
    assert len(load_catalog(tmp_path, num_products=1).products) == 1
    # As the original engine, reviews.json is read only when asked: no reviews, rating 'N.A.'.
    shoes = load_catalog(tmp_path).products[0]
    assert shoes.reviews == [] and shoes.rating == "N.A."


def test_an_empty_attribute_list_stays_empty_and_only_a_missing_one_is_a_placeholder(tmp_path):
    attrs = {"B000000001": {"attributes": []}, "B000000002": {"instruction": "x"}}
    shoes, tea = load_catalog(_write_original(tmp_path, attrs=attrs)).products
    assert shoes.attributes == [] and tea.attributes == ["DUMMY_ATTR"]


def test_loader_errors_name_the_file_and_key(tmp_path):
    with pytest.raises(ValueError, match="has none of"):
        load_catalog(tmp_path)
    bad = [{"asin": "B000000001", "full_description": "", "small_description": "", "pricing": "",
            "customization_options": {}, "category": "", "query": "", "product_category": ""}]
    _write_original(tmp_path, items=bad)
    with pytest.raises(ValueError, match=r"items_shuffle_1000\.json: row 0 \(asin B000000001\) has no key 'name'"):
        load_catalog(tmp_path)
    _write_original(tmp_path, human={"B000000001": [{"instruction": "x", "instruction_options": []}]})
    with pytest.raises(ValueError, match=r"items_human_ins\.json: B000000001 instruction 0 has no key "
                                         r"'instruction_attributes'"):
        load_catalog(tmp_path)
    (tmp_path / "items_human_ins.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"cannot read .*items_human_ins\.json"):
        load_catalog(tmp_path)
    (tmp_path / "items_human_ins.json").write_text("[]")
    with pytest.raises(ValueError, match=r"items_human_ins\.json must hold a JSON dict"):
        load_catalog(tmp_path)


def test_catalog_checks_its_goals_and_split_sizes():
    catalog = generate_catalog(20, 1)
    with pytest.raises(ValueError, match="not in the catalog"):
        Catalog(catalog.products[1:], catalog.goals)
    with pytest.raises(ValueError, match="test_goals must be an int >= 0"):
        Catalog(catalog.products, catalog.goals, test_goals=-1)
    with pytest.raises(ValueError, match="num_products must be an int >= 1"):
        generate_catalog(0)
