package configs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/carve-dev/carve/internal/textfmt"
)

// Problem is one thing wrong with a profile file, at one place.
type Problem struct {
	// Path names the place, e.g. "profiles.balanced[0].mig",
	// "windows[1].schedule" or "defaultProfile"; "" for the whole file.
	Path string
	// Message says what is wrong there.
	Message string
	// Unverified marks a place that could not be checked here rather than
	// one found wrong: an entry for a GPU model neither the catalogue nor
	// this node knows. It is checked on the nodes that have that model.
	Unverified bool
}

// String returns "path: message", or the message alone for the whole file.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Error holds every problem found in a profile file, sorted by path (list
// indices in numeric order), then message.
type Error struct {
	// Problems are the problems, sorted, without duplicates.
	Problems []Problem
}

// maxErrorLines bounds the problems Error writes out, so that a file with
// thousands of problems gives a message that fits an Event or an
// annotation; Problems holds them all.
const maxErrorLines = 20

// Error returns one line per problem, at most maxErrorLines of them and
// then a line that counts the rest.
func (e *Error) Error() string {
	return strings.Join(Lines(e.Problems), "\n")
}

// Lines writes problems one per line, at most maxErrorLines of them and
// then a line that counts the rest: the form Events and annotations carry.
func Lines(problems []Problem) []string {
	n := min(len(problems), maxErrorLines)
	lines := make([]string, n, n+1)
	for i, p := range problems[:n] {
		lines[i] = p.String()
	}
	if rest := len(problems) - n; rest > 0 {
		lines = append(lines, fmt.Sprintf("... and %d more problems (%d in all)", rest, len(problems)))
	}
	return lines
}

// UnknownProfileError says that a name given as a profile names none of the
// file's profiles.
type UnknownProfileError struct {
	// Name is the unknown name.
	Name string
	// Known are the file's profile names, sorted.
	Known []string
}

// Error names the unknown profile and lists the known ones.
func (e *UnknownProfileError) Error() string {
	return unknownProfileMessage(e.Name, e.Known)
}

func unknownProfileMessage(name string, known []string) string {
	msg := fmt.Sprintf("unknown profile %q", name)
	if s := suggest(name, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	if len(known) == 0 {
		return msg + "; the file defines no profiles"
	}
	return msg + "; known profiles: " + strings.Join(known, ", ")
}

// problems collects problems while a file is checked.
type problems struct {
	list []Problem
}

func (ps *problems) add(path, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: path, Message: textfmt.OneLine(fmt.Sprintf(format, args...))})
}

// unverified records a place that cannot be checked here (see
// Problem.Unverified).
func (ps *problems) unverified(path, format string, args ...any) {
	ps.list = append(ps.list, Problem{Path: path, Message: textfmt.OneLine(fmt.Sprintf(format, args...)), Unverified: true})
}

// err returns nil when there are no problems, else an *Error with the
// problems sorted and deduplicated. Unverified places are not problems.
func (ps *problems) err() error {
	if err := sorted(ps.only(false)); err != nil {
		return err
	}
	return nil
}

// unverifiedPlaces returns the unverified places, sorted and deduplicated.
func (ps *problems) unverifiedPlaces() []Problem {
	if e := sorted(ps.only(true)); e != nil {
		return e.Problems
	}
	return nil
}

// only returns the problems whose Unverified is unverified.
func (ps *problems) only(unverified bool) []Problem {
	var out []Problem
	for _, p := range ps.list {
		if p.Unverified == unverified {
			out = append(out, p)
		}
	}
	return out
}

// sorted returns nil for no problems, else an *Error with them sorted and
// deduplicated.
func sorted(list []Problem) *Error {
	if len(list) == 0 {
		return nil
	}
	sort.SliceStable(list, func(i, j int) bool {
		if c := comparePaths(list[i].Path, list[j].Path); c != 0 {
			return c < 0
		}
		return list[i].Message < list[j].Message
	})
	out := list[:1]
	for _, p := range list[1:] {
		if p != out[len(out)-1] {
			out = append(out, p)
		}
	}
	return &Error{Problems: out}
}

// comparePaths orders paths as text, except that runs of digits compare as
// numbers, so that "rules[2]" sorts before "rules[10]".
func comparePaths(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, ea := strconv.ParseUint(a[:da], 10, 64)
			nb, eb := strconv.ParseUint(b[:db], 10, 64)
			if ea == nil && eb == nil && na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
			if c := strings.Compare(a[:da], b[:db]); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			if a[0] < b[0] {
				return -1
			}
			return 1
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitPrefix(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// suggest returns the candidate closest to name, ignoring case, when it is
// close enough to be a likely typo, else "".
func suggest(name string, candidates []string) string {
	best, bestDist := "", 0
	lname := strings.ToLower(name)
	for _, c := range candidates {
		d := editDistance(lname, strings.ToLower(c))
		if d == 0 {
			return c
		}
		limit := 2
		if len(c) <= 4 {
			limit = 1
		}
		if d <= limit && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of two strings, by byte.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 1 << 16
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
