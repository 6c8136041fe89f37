package claims

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// madeMessage is what carve-agent logs once it has made the MIG device of
// a dynamic device for a claim (with the claim's UID as "claim").
const madeMessage = "made a MIG device for a claim"

// madeAt returns the time carve-agent logged the MIG device made for the
// claim uid, read from its log of JSON lines.
func madeAt(logPath, uid string) (time.Time, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return time.Time{}, fmt.Errorf("agent log: %w", err)
	}
	defer f.Close()
	at, err := findMade(f, uid)
	if err != nil {
		return time.Time{}, fmt.Errorf("agent log %s: %w", logPath, err)
	}
	return at, nil
}

// findMade reads JSON log lines from r for the line madeMessage of claim
// uid and returns its time; lines that are not JSON are skipped.
func findMade(r io.Reader, uid string) (time.Time, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(madeMessage)) {
			continue
		}
		var rec struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			Claim string    `json:"claim"`
		}
		if json.Unmarshal(line, &rec) != nil || rec.Msg != madeMessage || rec.Claim != uid {
			continue
		}
		return rec.Time, nil
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, fmt.Errorf("no %q line for claim %s", madeMessage, uid)
}
