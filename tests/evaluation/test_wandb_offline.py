"""An evaluation logging to W&B with no key configured logs offline and says so, instead of failing after
it has scored (as training does)."""

from test_endpoint import ScriptedEndpoint
from test_hostile import evaluate


def test_an_evaluation_without_a_wandb_key_logs_offline(tmp_path, movie_data, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no `wandb login` either
    endpoint = ScriptedEndpoint(["ok"] * 2)
    try:
        out = tmp_path / "r"
        result = evaluate(out, movie_data, endpoint.url, "--limit", "2", wandb=True)
    finally:
        endpoint.close()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no W&B API key found: logging offline" in result.stderr
    assert any(p.name.startswith("offline-run-") for p in (out / "wandb").iterdir())
