-- The token bucket (src/token_bucket.rs): take n tokens, or peek.
return gcra({ take = true, peek = true })
