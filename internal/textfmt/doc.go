// Package textfmt writes the small pieces of text that carve's messages
// share, so that every message says them the same way: lists of GPU
// indices, and errors kept on one line.
package textfmt
