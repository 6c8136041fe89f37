package dra

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/atomicfile"
)

// claimsFile is the prepared claims' record in the state directory.
const claimsFile = "dra-claims.json"

// claimStore is the record of prepared claims, in memory and, with a
// state directory, on disk.
type claimStore struct {
	path string // "" keeps the record in memory only
	rec  carvev1.PreparedClaims
}

// loadClaims reads the record from dir ("" for none). A record that cannot
// be read is an error: forgetting prepared claims would let their devices
// be destroyed under running pods.
func loadClaims(dir string) (*claimStore, error) {
	s := &claimStore{rec: carvev1.PreparedClaims{Version: carvev1.PreparedClaimsVersion, Claims: map[string]carvev1.PreparedClaim{}}}
	if dir == "" {
		return s, nil
	}
	s.path = filepath.Join(dir, claimsFile)
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read prepared claims: %w", err)
	}
	if s.rec, err = carvev1.DecodePreparedClaims(data); err != nil {
		return nil, fmt.Errorf("%s: %w (move it away to start afresh: the claims it lists are then no longer known as prepared)", s.path, err)
	}
	return s, nil
}

func (s *claimStore) has(uid string) bool {
	_, ok := s.rec.Claims[uid]
	return ok
}

// save writes the record, atomically.
func (s *claimStore) save() error {
	if s.path == "" {
		return nil
	}
	data, err := s.rec.Encode()
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.path, data, 0o600); err != nil {
		return fmt.Errorf("save prepared claims %s: %w", s.path, err)
	}
	return nil
}

// holderOf returns the UID of a prepared claim other than uid that holds
// the device, or "".
func (s *claimStore) holderOf(device, uid string) string {
	for other, c := range s.rec.Claims {
		if other == uid {
			continue
		}
		for _, d := range c.Devices {
			if d.Device == device {
				return other
			}
		}
	}
	return ""
}
