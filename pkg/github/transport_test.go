package github

import (
	"net/http"
	"testing"
)

func TestAnswerTo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		status      int
		reauthed    bool
		retriesLeft bool
		want        answer
	}{
		{"ok", http.StatusOK, false, true, answerHandUp},
		{"redirect", http.StatusNotModified, false, true, answerHandUp},
		{"first 401 re-mints", http.StatusUnauthorized, false, true, answerReauth},
		{"second 401 is handed up", http.StatusUnauthorized, true, true, answerHandUp},
		{"403 may be a rate limit", http.StatusForbidden, false, true, answerRateLimited},
		{"429 may be a rate limit", http.StatusTooManyRequests, true, false, answerRateLimited},
		{"404 is handed up", http.StatusNotFound, false, true, answerHandUp},
		{"422 is handed up", http.StatusUnprocessableEntity, false, true, answerHandUp},
		{"500 is retried", http.StatusInternalServerError, false, true, answerServerError},
		{"502 is retried", http.StatusBadGateway, true, true, answerServerError},
		{"500 without retries left is handed up", http.StatusInternalServerError, false, false, answerHandUp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := answerTo(tt.status, tt.reauthed, tt.retriesLeft); got != tt.want {
				t.Errorf("answerTo(%d, %v, %v) = %d, want %d", tt.status, tt.reauthed, tt.retriesLeft, got, tt.want)
			}
		})
	}
}
