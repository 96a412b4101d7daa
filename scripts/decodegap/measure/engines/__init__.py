"""Engines people deploy, measured under the project's protocol (issue: engines at batch 1).

  gguf_file   a card's shapes as a GGUF file with random weights (llama.cpp's tensor names and
              metadata, written with the `gguf` package), its stored bytes counted from the file

transformers' own `generate` loop is a decode mode (decodegap.measure.modes.GenerateDecoder): it
runs the project's model, so it needs nothing from here.
"""
