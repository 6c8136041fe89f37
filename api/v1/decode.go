package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// decodeStrict decodes one JSON object from data into v, refusing fields v
// does not know (a file a newer agent wrote) and anything after the
// object.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}
