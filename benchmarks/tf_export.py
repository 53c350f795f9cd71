"""Convert Keras models to ONNX with tf2onnx (for ``benchmarks.real_exports``'
``tf2onnx`` section). Runs under an interpreter that has TensorFlow and
tf2onnx (they do not share an environment with this project's onnx and
protobuf): ``python benchmarks/tf_export.py OUT_DIR [NAME ...]``. Random
weights (``weights=None``), a dynamic batch axis, opset 17; one line per
model on stdout: ``ok NAME`` or ``failed NAME: error``.
"""

from __future__ import annotations

import os
import sys
import warnings


def _models() -> dict:
    import tensorflow as tf

    apps, layers = tf.keras.applications, tf.keras.layers

    def rnn():
        i = tf.keras.Input((20, 16))
        x = layers.LSTM(32, return_sequences=True)(i)
        x = layers.Bidirectional(layers.GRU(24))(x)
        return tf.keras.Model(i, layers.Dense(5)(x))

    def attention():
        i = tf.keras.Input((12, 32))
        x = layers.MultiHeadAttention(4, 8)(i, i)
        x = layers.LayerNormalization()(x + i)
        return tf.keras.Model(i, layers.GlobalAveragePooling1D()(x))

    def upsampling():
        i = tf.keras.Input((32, 32, 3))
        x = layers.Conv2D(8, 3, padding="same")(i)
        x = layers.UpSampling2D(2, interpolation="bilinear")(x)
        x = layers.SeparableConv2D(8, 3)(x)
        return tf.keras.Model(i, layers.Conv2DTranspose(4, 3, strides=2)(x))

    def conv1d_rnn():
        i = tf.keras.Input((100, 8))
        x = layers.Conv1D(16, 5, dilation_rate=2)(i)
        x = layers.MaxPooling1D(2)(x)
        return tf.keras.Model(i, layers.SimpleRNN(8)(x))

    return {
        "ResNet50": lambda: apps.ResNet50(weights=None),
        "MobileNetV2": lambda: apps.MobileNetV2(weights=None),
        "EfficientNetB0": lambda: apps.EfficientNetB0(weights=None),
        "InceptionV3": lambda: apps.InceptionV3(weights=None),
        "DenseNet121": lambda: apps.DenseNet121(weights=None),
        "NASNetMobile": lambda: apps.NASNetMobile(weights=None),
        "ConvNeXtTiny": lambda: apps.ConvNeXtTiny(weights=None),
        "rnn": rnn, "attention": attention, "upsampling": upsampling, "conv1d_rnn": conv1d_rnn,
    }


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore")
    import tensorflow as tf
    import tf2onnx
    from export_lines import report

    out, names = sys.argv[1], sys.argv[2:]
    models = _models()

    def export(name: str) -> None:
        model = models[name]()
        spec = (tf.TensorSpec((None, *model.input_shape[1:]), tf.float32, name="input"),)
        tf2onnx.convert.from_keras(model, input_signature=spec, opset=17,
                                   output_path=os.path.join(out, f"{name}.onnx"))

    return report(names or list(models), export)


if __name__ == "__main__":
    sys.exit(main())
