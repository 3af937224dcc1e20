"""The downlink: the global model as a compressed delta against each client's copy, with the
server's error feedback (pipeline.federated.downlink), without Flower processes."""

from __future__ import annotations

import numpy as np
import pytest

from baton.pipeline.federated import compression as C
from baton.pipeline.federated import downlink as D


def _model(seed=0):
    g = np.random.default_rng(seed)
    return [g.normal(0, 0.1, (40, 24)).astype(np.float32), np.zeros(24, np.float32),
            g.normal(0, 0.1, (24, 3)).astype(np.float32)]


def _step(weights, g, scale=0.01):
    return [(w + g.normal(0, scale, w.shape)).astype(np.float32) for w in weights]


class Client:
    """What the ClientApp's downlink_mod does with a message: rebuild, keep, answer."""

    def __init__(self):
        self.copy = None

    def handle(self, config, sent):
        weights = D.receive(config, sent, self.copy)
        self.copy = weights
        return D.digest(weights)


def _bytes(sent):
    return C.payload_bytes(sent) if sent else 0


@pytest.mark.parametrize("method", ["int8", "fp16"])
def test_over_many_rounds_the_copy_tracks_the_global_model_within_one_step(method):
    g = np.random.default_rng(1)
    server, client = D.ServerCopies(method), Client()
    weights = _model()
    full = sum(w.nbytes for w in weights)
    modes, sizes, errors = [], [], []
    for _ in range(40):
        weights = _step(weights, g)
        for _kind in ("train", "evaluate"):  # one global model per round, sent twice
            config, sent = server.prepare(7, weights)
            assert server.confirm(7, client.handle(config, sent))
            modes.append(config["downlink"])
            sizes.append(_bytes(sent))
        err = max(float(np.abs(c - w).max()) for c, w in zip(client.copy, weights, strict=True))
        errors.append(err)
        # half a quantization step of the last delta (about 8 sigma of a round's change over
        # 255 steps), not a sum over rounds
        assert err <= (0.01 * 8 / 255 / 2 * 1.5 if method == "int8" else 1e-4)
    # the first message is full, the second sends the same model again: a reference only
    assert modes == ["full", "copy"] + ["delta", "copy"] * 39
    assert sizes[0] == full and sizes[1::2] == [0] * 40
    assert max(sizes[2:]) <= full / (3.5 if method == "int8" else 1.9)
    assert errors[-1] <= 2 * np.median(errors)  # no drift: round 40 as good as the middle


def test_the_evaluate_message_of_a_round_reuses_the_copy_the_next_train_message_needs():
    server, client = D.ServerCopies("int8"), Client()
    w1 = _model()
    config, sent = server.prepare(3, w1)
    assert server.confirm(3, client.handle(config, sent)) and config["downlink"] == "full"
    w2 = _step(w1, np.random.default_rng(2))
    config, sent = server.prepare(3, w2)  # round 1's evaluate: the new aggregate
    assert config["downlink"] == "delta" and server.confirm(3, client.handle(config, sent))
    config, sent = server.prepare(3, w2)  # round 2's train: the same model again
    assert config == {"downlink": "copy", "base": D.digest(client.copy)} and sent == {}
    assert server.confirm(3, client.handle(config, sent))


def test_the_server_computes_the_clients_reconstruction_bit_for_bit():
    g = np.random.default_rng(3)
    server, client = D.ServerCopies("int8"), Client()
    weights = _model()
    for _ in range(5):
        weights = _step(weights, g)
        config, sent = server.prepare(1, weights)
        answered = client.handle(config, sent)
        assert answered == server.pending[1].digest
        server.confirm(1, answered)
        for a, b in zip(server.held[1].weights, client.copy, strict=True):
            assert np.array_equal(a, b)


def test_a_client_without_the_base_copy_refuses_and_a_full_message_resets_it():
    server, client = D.ServerCopies("int8"), Client()
    w1 = _model()
    server.confirm(5, client.handle(*server.prepare(5, w1)))
    w2 = _step(w1, np.random.default_rng(4))
    config, sent = server.prepare(5, w2)
    assert config["downlink"] == "delta"
    lost = Client()  # the node lost its state (a restarted SuperNode under the same id)
    with pytest.raises(D.Stale, match="holds no copy"):
        lost.handle(config, sent)
    other = Client()
    other.copy = _model(seed=9)
    with pytest.raises(D.Stale, match="against copy"):
        other.handle(config, sent)
    server.forget(5)  # what the ServerApp does with a stale answer, then it sends again
    config, sent = server.prepare(5, w2)
    assert config == {"downlink": "full"}
    assert server.confirm(5, lost.handle(config, sent))
    assert all(np.array_equal(a, b) for a, b in zip(lost.copy, w2, strict=True))


def test_no_answer_or_a_wrong_digest_means_full_weights_next_time():
    server, client = D.ServerCopies("fp16"), Client()
    w1 = _model()
    server.confirm(2, client.handle(*server.prepare(2, w1)))
    w2 = _step(w1, np.random.default_rng(5))
    config, sent = server.prepare(2, w2)
    assert config["downlink"] == "delta"
    assert not server.confirm(2, None)  # the reply never came (or was an error)
    assert server.prepare(2, w2)[0] == {"downlink": "full"}
    assert not server.confirm(2, "0" * 32)  # a digest the server did not compute
    assert server.prepare(2, w2)[0] == {"downlink": "full"}


def test_a_restarted_server_sends_full_weights_which_replace_the_clients_copy():
    client = Client()
    w1 = _model()
    first = D.ServerCopies("int8")
    first.confirm(4, client.handle(*first.prepare(4, w1)))
    resumed = D.ServerCopies("int8")  # new run from the checkpoint: no record of copies
    w2 = _step(w1, np.random.default_rng(6))
    config, sent = resumed.prepare(4, w2)
    assert config == {"downlink": "full"}
    assert resumed.confirm(4, client.handle(config, sent))


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="fp16 or int8. Received: 'none'"):
        D.ServerCopies("none")
    with pytest.raises(ValueError, match="downlink must be one of full, delta, copy. "
                                         "Received: 'diff'"):
        D.receive({"downlink": "diff"}, {}, None)


def test_a_client_that_built_the_same_initial_model_gets_a_reference_in_round_one():
    w0 = _model()
    client = Client()
    client.copy = _model()  # built from the same settings and seed: the same digest
    server = D.ServerCopies("int8")
    of = D.digest(w0)
    assert D.digest(client.copy) == of
    server.held[8] = D.Copy(w0, of, of)  # what the ServerApp does with the setup answer
    config, sent = server.prepare(8, w0)
    assert config == {"downlink": "copy", "base": of} and sent == {}
    assert server.confirm(8, client.handle(config, sent))
