package instance

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"tusk.dev/tusk/internal/instance/sqlobjects"
)

func TestApplyStatus(t *testing.T) {
	for err, want := range map[error]int{
		sqlobjects.MissingDatabase("shop"):                          http.StatusUnprocessableEntity,
		fmt.Errorf("while: %w", sqlobjects.MissingDatabase("shop")): http.StatusUnprocessableEntity,
		errNotWritable:    http.StatusConflict,
		errPostgresDown:   http.StatusServiceUnavailable,
		errors.New("sql"): http.StatusInternalServerError,
	} {
		if got := applyStatus(err); got != want {
			t.Errorf("applyStatus(%v) = %d, want %d", err, got, want)
		}
	}
}
