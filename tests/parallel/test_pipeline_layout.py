"""Uneven pipeline splits as Megatron-Core writes them: a layout string, or first / last stage counts."""

from pathlib import Path

import pytest

from scalesim.app.run import run
from scalesim.app.setup import prepare
from scalesim.errors import InputError
from scalesim.models.zoo import get_model
from scalesim.parallel.stages import first_last_blocks, layout_blocks, model_chunks, parse_layout, pipeline_blocks
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_megatron_documented_deepseek_v3_layout_parses_to_its_table():
    # Megatron-Core docs/source/api-guide/pipeline_parallel_layout.md: DeepSeek-V3 (61 decoder layers
    # + 1 MTP layer) on PP16 x VPP2 is "Et*3|(tt|)*29,m|L": embedding + 3 decoders, then 2 decoders
    # per chunk, the MTP layer and the loss on chunks of their own.
    chunks = parse_layout("Et*3|(tt|)*29,m|L")
    assert len(chunks) == 32
    assert chunks[0] == "Ettt" and set(chunks[1:30]) == {"tt"} and chunks[30:] == ["m", "L"]
    assert "".join(chunks).count("t") == 61


def test_repeats_nest_and_commas_and_spaces_are_cosmetic():
    assert parse_layout("E, (t|(tt)*2|)*2 L") == parse_layout("Et|tttt|t|tttt|L")


@pytest.mark.parametrize("text", ["Et(t|L", "Et)|L", "Ex|L", "Et**2|L", "Et*|L", "tE|tL", "Et|tL|L",
                                  "Et|t|L", "Et||tL", "Et|tm|tL", "(" * 40 + "E" + ")" * 40 + "|ttL",
                                  "Et*99999|t*99999|L"])
def test_malformed_or_mismatched_layouts_are_refused_naming_the_key(text):
    with pytest.raises(InputError) as exc:
        layout_blocks(text, blocks=3, chunks=2)
    assert exc.value.key == "parallel.pipeline_layout"


def test_recipe_layouts_place_every_block_once():
    # NeMo's DeepSeek-V3 performance recipe, PP8 x VP2: embedding + 4, 14 x 4, 1 + loss.
    sizes = layout_blocks("Etttt|(tttt|)*14tL", blocks=61, chunks=16)
    assert sum(sizes) == 61 and sizes[0] == 4 and sizes[-1] == 1
    # Its PP16 recipe: 3 blocks on the first stage, 2 on the last, the others share the rest evenly.
    sizes = first_last_blocks(61, pp=16, virtual_stages=1, first=3, last=2)
    assert sum(sizes) == 61 and (sizes[0], sizes[-1]) == (3, 2) and len(set(sizes[1:-1])) == 1


def test_first_last_split_each_stage_evenly_over_its_virtual_chunks():
    pp, v = 4, 2
    sizes = first_last_blocks(32, pp, v, first=6, last=10)
    per_stage = [sum(sizes[c * pp + s] for c in range(v)) for s in range(pp)]
    assert per_stage[0] == 6 and per_stage[-1] == 10 and sum(per_stage) == 32
    assert all(sizes[s] == sizes[pp + s] for s in range(pp))


@pytest.mark.parametrize("first, last, pp, v", [(3, 4, 4, 1), (40, None, 4, 1), (5, None, 4, 2), (2, 2, 1, 1)])
def test_first_last_splits_megatron_cannot_form_are_refused(first, last, pp, v):
    with pytest.raises(InputError) as exc:
        first_last_blocks(32, pp, v, first, last)
    assert "pipeline_num_layers" in exc.value.key


def test_layout_and_first_last_together_are_refused():
    model = get_model("gpt2-124m", seq_len=1024)
    with pytest.raises(InputError, match="not both"):
        pipeline_blocks(model, 4, 1, "Ettt|ttt|ttt|tttL", first=3)
    assert pipeline_blocks(model, 4, 1) is None


def test_chunks_hold_every_layer_once_with_embedding_first_and_head_last():
    model = get_model("gpt2-124m", seq_len=1024)
    chunks = model_chunks(model, 4, layout_blocks("E|tttttt|tttt|ttL", 12, 4))
    assert [layer for c in chunks for layer in c] == list(model.layers)
    assert [layer.kind for layer in chunks[0]] == ["embedding"] * len(chunks[0])
    assert chunks[-1][-1].kind == "head"


def _small_pipeline():
    scenario, file = load_scenario(ROOT / "scenarios" / "8xh100-ddp.yaml")
    return scenario.with_changes(model="gpt2-124m", parallel={"dp": 2, "pp": 4},
                                 training={"global_batch": 16, "micro_batch": 1}), file


def test_a_layout_equal_to_the_even_split_gives_the_same_step():
    scenario, file = _small_pipeline()
    even = run(scenario, file).step_time_s
    assert run(scenario.with_changes(parallel={"pipeline_layout": "Ettt|ttt|ttt|tttL"}), file).step_time_s == even
    same = scenario.with_changes(parallel={"decoder_first_pipeline_num_layers": 3,
                                           "decoder_last_pipeline_num_layers": 3})
    assert run(same, file).step_time_s == even
    # Piling blocks on one stage makes it the slowest: never faster than the even split.
    assert run(scenario.with_changes(parallel={"pipeline_layout": "Et|t|t|t*9L"}), file).step_time_s > even


def test_memory_sees_the_layout():
    scenario, file = _small_pipeline()
    heavy_first = prepare(scenario.with_changes(parallel={"pipeline_layout": "Et*9|t|t|tL"}), file).step
    even = prepare(scenario, file).step
    assert heavy_first.stages[0].layers != even.stages[0].layers
    assert heavy_first.memory.total > even.memory.total


def test_a_scenario_with_a_bad_layout_names_file_and_key():
    scenario, file = _small_pipeline()
    with pytest.raises(InputError) as exc:
        prepare(scenario.with_changes(parallel={"pipeline_layout": "Ettt|ttt|tttL"}), file)
    assert exc.value.key == "parallel.pipeline_layout" and exc.value.file == file
    assert "pp x virtual_stages is 4" in str(exc.value)


def test_searched_plans_keep_the_layout_only_on_its_own_split():
    from scalesim.app.plans import PlanPoint, scenario_for
    scenario, file = _small_pipeline()
    scenario = scenario.with_changes(parallel={"pipeline_layout": "Et|t*5|t*5|tL"})
    same = scenario_for(scenario, PlanPoint(8, 2, pp=4), file)
    other = scenario_for(scenario, PlanPoint(8, 4, pp=2), file)
    assert same.parallel.pipeline_layout == "Et|t*5|t*5|tL" and other.parallel.pipeline_layout is None


def test_nanotron_placement_and_a_layout_together_are_refused_and_nanotron_is_a_layout_of_its_own():
    from scalesim.parallel.cost_balance import nanotron_blocks
    scenario, file = _small_pipeline()
    with pytest.raises(InputError) as exc:
        prepare(scenario.with_changes(parallel={"pipeline_balance": "nanotron",
                                                "pipeline_layout": "Ettt|ttt|ttt|tttL"}), file)
    assert exc.value.key == "parallel.pipeline_balance" and exc.value.file == file
    # The stages the step plays are the ones nanotron's rule places.
    step = prepare(scenario.with_changes(parallel={"pipeline_balance": "nanotron", "dp": 4, "pp": 2}), file).step
    placed = [sum(layer.kind == "transformer_block" for layer in s.layers) for s in step.stages]
    assert tuple(placed) == nanotron_blocks(get_model("gpt2-124m", seq_len=1024), 2)
    assert placed[0] > placed[1]          # gpt2's large head pushes blocks to the first stage
