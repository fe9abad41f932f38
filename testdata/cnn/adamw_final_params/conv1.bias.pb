B
conv1.biasJÏ=$ÿ¦¼ÐÕ¾¥O<¢
U½?ž¾