"""Statistics worked by hand: one column, a camera's channels, episodes combined, JSON round trip."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.recording import stats as st


def test_column_stats_of_a_vector_column() -> None:
    values = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [5.0, 50.0]], dtype=np.float32)
    s = st.column_stats(values)
    assert list(s) == ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]
    np.testing.assert_array_equal(s["min"], [1.0, 10.0])
    np.testing.assert_array_equal(s["max"], [5.0, 50.0])
    np.testing.assert_allclose(s["mean"], [3.0, 30.0])
    np.testing.assert_allclose(s["std"], [np.sqrt(2.0), 10 * np.sqrt(2.0)])
    np.testing.assert_array_equal(s["count"], [5])
    assert s["count"].dtype == np.int64
    # linear interpolation over 5 points: q at position 4q
    np.testing.assert_allclose(s["q01"], [1.04, 10.4])
    np.testing.assert_allclose(s["q10"], [1.4, 14.0])
    np.testing.assert_allclose(s["q50"], [3.0, 30.0])
    np.testing.assert_allclose(s["q90"], [4.6, 46.0])
    np.testing.assert_allclose(s["q99"], [4.96, 49.6])


def test_column_stats_keep_integer_extremes() -> None:
    s = st.column_stats(np.array([3, 1, 2], dtype=np.int64))
    assert s["min"].dtype == np.int64 and s["min"].tolist() == [1]
    assert s["max"].tolist() == [3]
    assert s["mean"].dtype == np.float64


def test_image_stats_by_hand() -> None:
    img = np.zeros((4, 4, 3), dtype=np.uint8)
    img[..., 0] = 255
    img[:2, :, 1] = 51  # half the green pixels at 0.2, half at 0
    img[..., 2] = 102
    acc = st.ImageStats()
    acc.add(img)
    acc.add(img)
    s = acc.result()
    assert set(s) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    for k, v in s.items():
        assert v.shape == ((1,) if k == "count" else (3, 1, 1)), k
    assert s["count"].tolist() == [2]
    np.testing.assert_allclose(s["min"].ravel(), [1.0, 0.0, 0.4])
    np.testing.assert_allclose(s["max"].ravel(), [1.0, 0.2, 0.4])
    np.testing.assert_allclose(s["mean"].ravel(), [1.0, 0.1, 0.4])
    np.testing.assert_allclose(s["std"].ravel(), [0.0, 0.1, 0.0], atol=1e-12)
    np.testing.assert_allclose(s["q10"].ravel(), [1.0, 0.0, 0.4])
    # the first level whose share reaches q: half the green pixels are 0, so q50 is 0
    np.testing.assert_allclose(s["q50"].ravel(), [1.0, 0.0, 0.4])
    np.testing.assert_allclose(s["q90"].ravel(), [1.0, 0.2, 0.4])


def test_image_stats_sample_large_frames_at_a_stride() -> None:
    img = np.zeros((401, 10, 3), dtype=np.uint8)
    img[1::2] = 255  # odd rows bright; a stride of 3 reads rows 0, 3, 6 ... (one in two of them odd)
    acc = st.ImageStats()
    acc.add(img)
    s = acc.result()
    # 401 rows -> stride ceil(401/200) = 3: rows 0..399 step 3 = 134 rows, 67 of them odd
    np.testing.assert_allclose(s["mean"].ravel(), [67 / 134] * 3)
    small = np.zeros((200, 10, 3), dtype=np.uint8)
    small[1::2] = 255  # stride 1: exactly half
    acc = st.ImageStats()
    acc.add(small)
    np.testing.assert_allclose(acc.result()["mean"].ravel(), [0.5] * 3)


def test_image_stats_without_frames() -> None:
    with pytest.raises(ValueError, match=r"^no frames were added$"):
        st.ImageStats().result()


def test_combine_weights_by_count() -> None:
    a = st.column_stats(np.array([[0.0], [2.0]]))  # mean 1, var 1
    b = st.column_stats(np.array([[4.0], [4.0], [4.0], [4.0], [4.0], [4.0]]))  # mean 4, var 0
    both = st.column_stats(np.array([[0.0], [2.0], [4.0], [4.0], [4.0], [4.0], [4.0], [4.0]]))
    c = st.combine([{"x": a, "only_a": a}, {"x": b}])
    assert set(c) == {"x", "only_a"}
    x = c["x"]
    np.testing.assert_allclose(x["mean"], [3.25])  # (2*1 + 6*4) / 8
    np.testing.assert_allclose(x["std"], both["std"])
    np.testing.assert_allclose(x["std"] ** 2, [(2 * (1 + 2.25**2) + 6 * 0.75**2) / 8])
    assert x["min"].tolist() == [0.0] and x["max"].tolist() == [4.0]
    assert x["count"].tolist() == [8] and x["count"].dtype == np.int64
    np.testing.assert_allclose(x["q50"], [(2 * 1.0 + 6 * 4.0) / 8])
    np.testing.assert_allclose(x["q01"], [(2 * a["q01"][0] + 6 * 4.0) / 8])
    assert c["only_a"]["count"].tolist() == [2]
    np.testing.assert_allclose(c["only_a"]["mean"], [1.0])
    np.testing.assert_allclose(c["only_a"]["std"], [1.0])


def test_json_round_trip() -> None:
    s = {"x": {"mean": np.array([1.5, 2.0]), "count": np.array([3])}}
    data = st.to_json(s)
    assert data == {"x": {"mean": [1.5, 2.0], "count": [3]}}
    back = st.from_json(data)
    np.testing.assert_array_equal(back["x"]["mean"], [1.5, 2.0])
    assert isinstance(back["x"]["count"], np.ndarray)


def test_combine_keeps_dimensions_apart_and_small_spreads() -> None:
    a = st.column_stats(np.array([[0.0, 10.0], [0.5, 10.0]]))  # std 0.25 and 0
    b = st.column_stats(np.array([[0.5, 20.0], [0.5, 20.0]]))
    x = st.combine([{"x": a}, {"x": b}])["x"]
    np.testing.assert_allclose(x["mean"], [0.375, 15.0])
    # variance: (0.25**2 + 0.125**2 + 0 + 0.125**2) / 2 for the first, 25 for the second
    np.testing.assert_allclose(x["std"] ** 2, [(0.0625 + 2 * 0.015625) / 2, 25.0])
    np.testing.assert_allclose(x["q50"], [0.375, 15.0])


def test_image_stats_add_up_frames_and_single_pixels() -> None:
    dark = np.zeros((2, 2, 3), dtype=np.uint8)
    light = np.full((2, 2, 3), 255, dtype=np.uint8)
    light[0, 0] = 51  # one pixel of each channel at 0.2
    acc = st.ImageStats()
    acc.add(dark)
    acc.add(light)
    s = acc.result()
    np.testing.assert_allclose(s["mean"].ravel(), [(0.2 + 3.0) / 8] * 3)
    np.testing.assert_allclose(s["min"].ravel(), [0.0] * 3)
    # 4 of 8 pixels at 0: q50 is the first level reaching half, 0
    np.testing.assert_allclose(s["q50"].ravel(), [0.0] * 3)
    np.testing.assert_allclose(s["q90"].ravel(), [1.0] * 3)
    one = st.ImageStats()
    one.add(light)
    np.testing.assert_allclose(one.result()["min"].ravel(), [0.2] * 3)  # a level held by one pixel counts
