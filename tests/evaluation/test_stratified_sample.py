"""--sample N: whole units, per task in proportion (largest remainders), file order kept, seeded."""

from types import SimpleNamespace

from rectune.evaluation.sampling import stratified_sample, unit_of


def rows(counts: dict[str, int]) -> list:
    return [SimpleNamespace(id=f"{task}/{i}", task=task) for task, n in counts.items() for i in range(n)]


def test_each_task_gets_its_share_by_largest_remainder():
    data = rows({"explicit": 94, "implicit": 80, "misinformed": 93, "interest": 99, "demographics": 8})
    chosen = stratified_sample(data, 20, seed=0)
    # shares of 20: 5.03, 4.28, 4.97, 5.29, 0.43 -> floors 5, 4, 4, 5, 0 (18); the two largest
    # remainders (misinformed .97, demographics .43) get one more
    counts = {task: sum(r.task == task for r in chosen) for task in ("explicit", "implicit", "misinformed",
                                                                      "interest", "demographics")}  # fmt: skip
    assert counts == {"explicit": 5, "implicit": 4, "misinformed": 5, "interest": 5, "demographics": 1}
    assert chosen == [r for r in data if r in chosen]  # file order
    assert stratified_sample(data, 20, seed=0) == chosen and stratified_sample(data, 20, seed=1) != chosen
    assert stratified_sample(data, 1000) == data


def test_a_task_rounded_to_none_takes_a_unit_from_the_largest():
    # ml-100k's share: 362 interest queries, 9 demographics; of 10, shares 9.76 and 0.24 -> 9 + 1 by
    # remainder = 10 and 0; demographics then takes one from interest: 9 and 1
    data = rows({"interest": 362, "demographics": 9})
    chosen = stratified_sample(data, 10, seed=0)
    assert [sum(r.task == t for r in chosen) for t in ("interest", "demographics")] == [9, 1]
    # fewer units than tasks: no task can be promised one
    assert len(stratified_sample(rows({"a": 5, "b": 1, "c": 1}), 2, seed=0)) == 2


def test_a_perrec_group_is_drawn_whole():
    group_rows = [SimpleNamespace(id=f"g{g}/pairwise/{p}", task="pairwise", group=f"g{g}") for g in range(4)
                  for p in ("AB", "AC", "BC")]  # fmt: skip
    chosen = stratified_sample(group_rows, 2, seed=3)
    assert len(chosen) == 6 and len({unit_of(r) for r in chosen}) == 2
