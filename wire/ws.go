package wire

// WSNotice is a frame the WebSocket gateway sends a client about one of
// its messages, other than the message's delivery: why it was refused
// (Error: "Bad Request", "Too Many Requests", "Queue Full", "Service
// Unavailable", "Not Delivered"), or that it was a duplicate. ID is the
// message's id, when it gave one a notice can name. Its fields are in the
// order of their names, as the frames have always been written.
type WSNotice struct {
	Duplicate    bool    `json:"duplicate,omitempty"`
	Error        string  `json:"error,omitempty"`
	ID           *string `json:"id,omitempty"`
	Message      string  `json:"message"`
	RetryAfterMs *int64  `json:"retryAfterMs,omitempty"`
}

// The errors of WSNotice.
const (
	WSBadRequest  = "Bad Request"
	WSThrottled   = "Too Many Requests"
	WSQueueFull   = "Queue Full"
	WSUnavailable = "Service Unavailable"
	WSUndelivered = "Not Delivered"
)
