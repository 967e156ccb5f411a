"""MediaPipe's face landmark model with attention (custom ops Landmarks2TransformMatrix,
TransformTensorBilinear, TransformLandmarks: the official Python package cannot run it) on a real
face: the crop of the public-domain NASA portrait that scikit-image ships as ``astronaut``."""

from pathlib import Path

import numpy as np
import pytest

import litegpu

HERE = Path(__file__).parent / "mediapipe"


@pytest.fixture(scope="module")
def outputs():
    model = litegpu.CompiledModel.from_file(str(HERE / "face_landmark_with_attention.tflite"),
                                            litegpu.HardwareAccelerator.CPU)
    assert model.is_fully_accelerated()
    image = np.load(HERE / "astronaut_face_192.npz")["image"].astype(np.float32) / 255.0
    return model.run({"input_1": image[None]})


def test_the_model_sees_a_face(outputs):
    assert outputs["conv_faceflag"].item() > 5.0  # a logit: the face score is sigmoid(flag)


def test_the_468_mesh_landmarks_lie_inside_the_image(outputs):
    mesh = outputs["output_mesh_identity"].reshape(468, 3)
    assert (mesh[:, :2] >= 0).all() and (mesh[:, :2] < 192).all()


def test_the_irises_are_where_the_eyes_are(outputs):
    # Eye centres read off the crop by eye: (72, 88) on the image's left, (118, 88) on its right.
    left = outputs["output_left_iris"].reshape(5, 2).mean(axis=0)
    right = outputs["output_right_iris"].reshape(5, 2).mean(axis=0)
    np.testing.assert_allclose(left, [72, 88], atol=8)
    np.testing.assert_allclose(right, [118, 88], atol=8)
