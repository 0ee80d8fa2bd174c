"""Request building and response reading of the shared client (against the fake server)."""

import pytest
import requests

from sglang_asd.bench.client import GenRequest, build_payload, send, served_model


def test_generate_payload_puts_asd_fields_in_sampling_params_custom_params():
    """The form a gateway (smg) forwards: it rebuilds sampling_params from the keys it knows."""
    path, body = build_payload(GenRequest(text="hi", max_new_tokens=16, budget=8.0, ignore_eos=True))
    assert path == "/generate"
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 16, "ignore_eos": True,
                                       "custom_params": {"asd_budget": 8.0}}
    _, body = build_payload(GenRequest(text="hi", max_new_tokens=16))
    assert "custom_params" not in body["sampling_params"]
    assert body["text"] == "hi" and body["stream"] is False


def test_openai_payloads_put_asd_fields_top_level():
    path, body = build_payload(GenRequest(text="hi", max_new_tokens=4, budget=0.0, api="chat", stream=True))
    assert path == "/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["asd_budget"] == 0.0 and body["return_spec_tokens_details"] is True
    assert body["stream_options"] == {"include_usage": True}
    path, body = build_payload(GenRequest(text="hi", max_new_tokens=4, api="completions"))
    assert path == "/v1/completions" and body["prompt"] == "hi" and "asd_budget" not in body


def test_arm_fields_go_where_the_budget_goes():
    fields = {"asd_budget": 8, "asd_gate": 0.5, "asd_rule": "margin"}
    _, body = build_payload(GenRequest(text="hi", max_new_tokens=4, fields=fields))
    assert body["sampling_params"]["custom_params"] == fields
    _, body = build_payload(GenRequest(text="hi", max_new_tokens=4, fields=fields, api="chat"))
    assert {k: body[k] for k in fields} == fields
    with pytest.raises(ValueError, match="only hold asd_\\* request fields, got 'temperature'"):
        GenRequest(text="x", max_new_tokens=1, fields={"temperature": 1.0})
    with pytest.raises(ValueError, match="budget 2.0 and fields asd_budget 8 disagree"):
        GenRequest(text="x", max_new_tokens=1, budget=2.0, fields={"asd_budget": 8})


def test_request_validation():
    with pytest.raises(ValueError, match="api must be one of"):
        GenRequest(text="x", max_new_tokens=1, api="grpc")
    with pytest.raises(ValueError, match="got 0"):
        GenRequest(text="x", max_new_tokens=0)


@pytest.mark.parametrize("api", ["generate", "completions", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_reads_every_route(fake_server_url, api, stream):
    s = requests.Session()
    r = send(s, fake_server_url, GenRequest(text="tell me", max_new_tokens=12, budget=8.0, ignore_eos=True,
                                            api=api, stream=stream))
    assert r.ok, r.error
    assert r.text == " ".join(f"t{i}" for i in range(12))
    assert r.completion_tokens == 12
    assert r.spec_verify_ct == 4 and r.spec_accept_length == pytest.approx(3.0)
    assert r.receipt["applied"] is True and r.spent == pytest.approx(0.6)
    assert r.finish_reason == "length"
    assert r.latency_s > 0
    if stream:
        assert 0 < r.ttft_s <= r.latency_s and r.tpot_s is not None
    else:
        assert r.ttft_s is None and r.tpot_s is None


def test_strict_receipt_and_natural_stop(fake_server_url):
    r = send(requests.Session(), fake_server_url, GenRequest(text="tell me", max_new_tokens=100, budget=0.0))
    assert r.ok and r.finish_reason == "stop" and r.completion_tokens < 100
    assert r.asd_applied is False and r.receipt["reason"] == "budget_zero"


def test_http_error_is_a_result_not_an_exception(fake_server_url):
    r = send(requests.Session(), fake_server_url, GenRequest(text="x", max_new_tokens=4, budget=65.0))
    assert not r.ok and r.status == 400
    assert "asd_budget must be a finite number in [0, 64], got 65.0" in r.error


def test_connection_error_is_a_result():
    r = send(requests.Session(), "http://127.0.0.1:9", GenRequest(text="x", max_new_tokens=4), timeout=2)
    assert not r.ok and "ConnectionError" in r.error


def test_served_model(fake_server_url):
    assert served_model(requests.Session(), fake_server_url) == "fake-model"
    assert served_model(requests.Session(), "http://127.0.0.1:9", timeout=1) == "default"


def test_interrupted_pass_does_not_send_the_queued_requests(fake_server_url, monkeypatch):
    import time

    from sglang_asd.bench import runner

    sent = []
    real_send = runner.send

    def counting_send(*args, **kwargs):
        sent.append(1)
        return real_send(*args, **kwargs)

    def stop_after_two(i, result):
        if len(sent) >= 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(runner, "send", counting_send)
    reqs = [GenRequest(text="x", max_new_tokens=8, budget=0.0, ignore_eos=True, tag=str(i)) for i in range(40)]
    with pytest.raises(KeyboardInterrupt):
        runner.run_pass(fake_server_url, reqs, concurrency=1, progress=False, on_result=stop_after_two)
    time.sleep(0.5)             # let an in-flight request finish
    assert len(sent) <= 3       # the queued ones were cancelled, not sent before the interrupt got out
